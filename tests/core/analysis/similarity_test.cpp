// Cosine-similarity maps against a direct O(n^2 d) loop, full resolution and pooled.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "core/analysis/similarity.h"

using namespace kvscope::analysis;

namespace {

std::vector<float> direct_cosine(const std::vector<float>& x, int n, int d) {
  std::vector<float> sim(static_cast<std::size_t>(n) * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double dot = 0, ni = 0, nj = 0;
      for (int t = 0; t < d; ++t) {
        const double a = x[static_cast<std::size_t>(i) * d + t], b = x[static_cast<std::size_t>(j) * d + t];
        dot += a * b;
        ni += a * a;
        nj += b * b;
      }
      sim[static_cast<std::size_t>(i) * n + j] = ni > 0 && nj > 0 ? static_cast<float>(dot / std::sqrt(ni * nj)) : 0.0f;
    }
  return sim;
}

float direct_block(const std::vector<float>& sim, int n, int R, int C, int b, Pooling mode) {
  double sum = 0;
  float best = -2.0f;
  int cells = 0;
  for (int i = R * b; i < std::min(n, (R + 1) * b); ++i)
    for (int j = C * b; j < std::min(n, (C + 1) * b); ++j) {
      const float v = sim[static_cast<std::size_t>(i) * n + j];
      sum += v;
      best = std::max(best, v);
      ++cells;
    }
  return mode == Pooling::Max ? best : static_cast<float>(sum / cells);
}

}  // namespace

TEST_CASE("cosine similarity map at full resolution matches direct loops", "[similarity]") {
  const int n = 150, d = 16;  // more rows than one BLAS batch, not a multiple of it
  std::mt19937 rng(5);
  std::normal_distribution<float> g;
  std::vector<float> x(static_cast<std::size_t>(n) * d);
  for (auto& v : x) v = g(rng);
  for (int t = 0; t < d; ++t) x[static_cast<std::size_t>(7) * d + t] = 0.0f;  // a zero vector
  const Map2D m = cosine_similarity_map(x.data(), n, d, 0, Pooling::Max);
  const auto want = direct_cosine(x, n, d);
  REQUIRE(m.rows == n);
  REQUIRE(m.cols == n);
  CHECK(m.full_resolution());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(m.values[i] == Approx(want[i]).margin(1e-5));
  CHECK(m.at(7, 7) == 0.0f);
  CHECK(m.at(3, 3) == Approx(1.0f).margin(1e-5));
}

TEST_CASE("pooled cosine similarity map matches pooling the direct map", "[similarity]") {
  const int n = 203, d = 8;
  std::mt19937 rng(11);
  std::normal_distribution<float> g;
  std::vector<float> x(static_cast<std::size_t>(n) * d);
  for (auto& v : x) v = g(rng);
  const auto want = direct_cosine(x, n, d);
  for (auto mode : {Pooling::Max, Pooling::Mean}) {
    const Map2D m = cosine_similarity_map(x.data(), n, d, 50, mode);
    const int b = m.row_block;
    CHECK(b == 5);  // ceil(203 / 50)
    CHECK(m.rows == 41);
    CHECK(m.rows <= 50);
    for (int R = 0; R < m.rows; ++R)
      for (int C = 0; C < m.cols; ++C) CHECK(m.at(R, C) == Approx(direct_block(want, n, R, C, b, mode)).margin(1e-5));
  }
}

TEST_CASE("cache similarity map records positions of a compressed cache", "[similarity]") {
  kvscope::cache::KVCache cache(1, 1, 4);
  std::vector<float> k = {1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0}, v = {1, 2, 3, 4, 4, 3, 2, 1, 1, 1, 1, 1};
  const int32_t positions[] = {0, 1, 2};
  cache.append(0, k.data(), v.data(), 3, positions);
  const Map2D full = cache_similarity_map(cache, 0, 0, CachedVectors::Keys, 0, Pooling::Max);
  CHECK(full.source_positions.empty());
  CHECK(full.at(0, 2) == Approx(1.0 / std::sqrt(2.0)));
  kvscope::cache::CacheEdit edit;
  edit.heads.push_back({0, 0, {0, 2}, {}, {}, {}, {}});
  cache.apply(edit);
  const Map2D part = cache_similarity_map(cache, 0, 0, CachedVectors::Values, 0, Pooling::Max);
  CHECK(part.source_positions == std::vector<int32_t>{0, 2});
  CHECK(part.rows == 2);
  CHECK(part.at(0, 1) == Approx(10.0 / (std::sqrt(30.0) * 2.0)));
}
