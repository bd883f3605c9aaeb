// Block pooling against a direct computation over the dense matrix.
#include <algorithm>
#include <catch2/catch.hpp>
#include <array>
#include <random>

#include "core/analysis/pooling.h"
#include "core/common/error.h"

using namespace kvscope::analysis;

namespace {

std::vector<float> random_matrix(int rows, int cols, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> m(static_cast<std::size_t>(rows) * cols);
  for (auto& x : m) x = u(rng);
  return m;
}

// Reference: every output cell from its block of the dense matrix, written independently of pooling.cpp.
std::vector<float> direct_pool(const std::vector<float>& m, int rows, int cols, int rb, int cb, Pooling mode) {
  const int out_rows = (rows + rb - 1) / rb, out_cols = (cols + cb - 1) / cb;
  std::vector<float> out(static_cast<std::size_t>(out_rows) * out_cols);
  for (int R = 0; R < out_rows; ++R)
    for (int C = 0; C < out_cols; ++C) {
      double sum = 0.0;
      float best = -1e30f;
      int cells = 0;
      for (int r = R * rb; r < std::min(rows, (R + 1) * rb); ++r)
        for (int c = C * cb; c < std::min(cols, (C + 1) * cb); ++c) {
          const float v = m[static_cast<std::size_t>(r) * cols + c];
          sum += v;
          best = std::max(best, v);
          ++cells;
        }
      out[static_cast<std::size_t>(R) * out_cols + C] = mode == Pooling::Max ? best : static_cast<float>(sum / cells);
    }
  return out;
}

}  // namespace

TEST_CASE("block_for and PoolShape::fit bound the output", "[pooling]") {
  CHECK(block_for(2048, 512) == 4);
  CHECK(block_for(2049, 512) == 5);
  CHECK(block_for(100, 512) == 1);
  CHECK(block_for(100, 0) == 1);
  for (int n : {1, 511, 512, 513, 1000, 2048, 4097}) {
    const auto s = PoolShape::fit(n, n + 3, 512, 512, Pooling::Max);
    CHECK(s.rows() <= 512);
    CHECK(s.cols() <= 512);
    CHECK(s.rows() * s.row_block >= n);
  }
  const auto full = PoolShape::fit(700, 700, 0, 0, Pooling::Mean);
  CHECK(full.row_block == 1);
  CHECK(full.rows() == 700);
}

TEST_CASE("pool_matrix matches direct block pooling, ragged edges", "[pooling]") {
  for (auto mode : {Pooling::Max, Pooling::Mean})
    for (auto [rows, cols, rb, cb] : std::vector<std::array<int, 4>>{{37, 53, 4, 5}, {64, 64, 8, 8}, {10, 7, 1, 1}, {9, 30, 9, 31}}) {
      const auto m = random_matrix(rows, cols, 1234u + rows);
      PoolShape shape{rows, cols, rb, cb, mode};
      const Map2D got = pool_matrix(m.data(), rows, cols, shape);
      const auto want = direct_pool(m, rows, cols, rb, cb, mode);
      REQUIRE(got.values.size() == want.size());
      CHECK(got.rows == shape.rows());
      CHECK(got.cols == shape.cols());
      CHECK(got.source_rows == rows);
      CHECK(got.row_block == rb);
      for (std::size_t i = 0; i < want.size(); ++i) CHECK(got.values[i] == Approx(want[i]).margin(1e-6));
    }
}

TEST_CASE("RowPooler: mapped columns, rows in parts and missing cells count as zero", "[pooling]") {
  const int n = 45;
  // A causal matrix with some evicted columns: dense reference holds explicit zeros there.
  auto dense = random_matrix(n, n, 7u, 0.0f, 1.0f);
  std::vector<bool> evicted(n, false);
  for (int j : {3, 4, 5, 17, 30}) evicted[j] = true;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (j > i || evicted[j]) dense[static_cast<std::size_t>(i) * n + j] = 0.0f;
  // Rows 10..12 never arrive at all.
  for (int i = 10; i <= 12; ++i)
    for (int j = 0; j < n; ++j) dense[static_cast<std::size_t>(i) * n + j] = 0.0f;

  for (auto mode : {Pooling::Max, Pooling::Mean}) {
    PoolShape shape{n, n, 4, 6, mode};
    MapCollector collector(shape);
    RowPooler pooler(shape, collector.sink());
    int emitted = 0;
    RowPooler counting(shape, [&](int, std::span<const float>) { ++emitted; });
    for (int i = 0; i < n; ++i) {
      if (i >= 10 && i <= 12) continue;
      // The row as the engine gives it: only the surviving entries, with their positions, in two parts.
      std::vector<float> values;
      std::vector<int32_t> positions;
      for (int j = 0; j <= i; ++j)
        if (!evicted[j]) {
          values.push_back(dense[static_cast<std::size_t>(i) * n + j]);
          positions.push_back(j);
        }
      const std::size_t half = values.size() / 2;
      pooler.add_row(i, std::span<const float>(values.data(), half), std::span<const int32_t>(positions.data(), half));
      pooler.add_row(i, std::span<const float>(values.data() + half, values.size() - half),
                     std::span<const int32_t>(positions.data() + half, positions.size() - half));
      counting.add_row(i, values, positions);
    }
    pooler.finish();
    counting.finish();
    counting.finish();  // idempotent
    CHECK(emitted == shape.rows());
    const Map2D got = collector.take();
    const auto want = direct_pool(dense, n, n, 4, 6, mode);
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(got.values[i] == Approx(want[i]).margin(1e-6));
  }
}

TEST_CASE("Max pooling of negative values keeps the negative maximum of a full block", "[pooling]") {
  std::vector<float> m = {-0.5f, -0.2f, -0.9f, -0.1f};
  const Map2D got = pool_matrix(m.data(), 2, 2, PoolShape{2, 2, 2, 2, Pooling::Max});
  REQUIRE(got.values.size() == 1);
  CHECK(got.values[0] == Approx(-0.1f));
}

TEST_CASE("RowPooler rejects rows that come back after their block was emitted", "[pooling]") {
  PoolShape shape{8, 8, 2, 2, Pooling::Max};
  RowPooler pooler(shape, [](int, std::span<const float>) {});
  std::vector<float> row(8, 1.0f);
  pooler.add_row(5, row);
  CHECK_THROWS_AS(pooler.add_row(1, row), kvscope::Error);
}

TEST_CASE("Max pooling of causal prefix rows matches the dense reference for every block width", "[pooling]") {
  // Rows given as prefixes 0..i (a causal map) with signed values: cells right of the prefix are absent
  // and count as 0, so blocks straddling the diagonal mix present negatives with absent zeros.
  for (int cb = 1; cb <= 9; ++cb)
    for (int rb : {1, 3, 4}) {
      const int n = 61;
      const auto values = random_matrix(n, n, 99u + cb * 7 + rb, -1.0f, 1.0f);
      std::vector<float> dense(values.size(), 0.0f);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j <= i; ++j) dense[static_cast<std::size_t>(i) * n + j] = values[static_cast<std::size_t>(i) * n + j];
      PoolShape shape{n, n, rb, cb, Pooling::Max};
      MapCollector collector(shape);
      RowPooler pooler(shape, collector.sink());
      for (int i = 0; i < n; ++i)
        pooler.add_row(i, std::span<const float>(values.data() + static_cast<std::size_t>(i) * n, static_cast<std::size_t>(i + 1)));
      pooler.finish();
      const Map2D got = collector.take();
      const auto want = direct_pool(dense, n, n, rb, cb, Pooling::Max);
      REQUIRE(got.values.size() == want.size());
      int mismatches = 0;
      for (std::size_t k = 0; k < want.size(); ++k) mismatches += got.values[k] != want[k];
      INFO("col_block " << cb << ", row_block " << rb);
      CHECK(mismatches == 0);
    }
}
