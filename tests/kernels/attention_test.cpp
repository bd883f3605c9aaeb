// The engine's attention (ragged cache, GQA, causal by original position, side outputs) against a direct
// O(n^2) loop over the same data.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "core/engine/attention_kernel.h"

using namespace kvscope;

namespace {

struct Setup {
  model::ModelConfig config;
  cache::KVCache cache;
  std::vector<float> q;
  std::vector<int32_t> query_positions;
};

// Cache entries per KV head: an evicted-looking prefix (gappy positions) followed by the step's own n keys.
Setup make_setup(int n_heads, int n_kv_heads, int d, int n, unsigned seed) {
  model::ModelConfig c;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = d;
  c.n_layers = 1;
  Setup s{c, cache::KVCache(1, n_kv_heads, d), {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  // Old entries: positions 0, 2, 5, 9, ... (a compressed history), same for all heads for append's sake.
  const int old = 6;
  std::vector<int32_t> old_positions;
  for (int i = 0; i < old; ++i) old_positions.push_back(i * (i + 1) / 2 + i);
  const int first_new = old_positions.back() + 3;
  for (int t = 0; t < old + n; ++t) {
    std::vector<float> k(n_kv_heads * d), v(n_kv_heads * d);
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
    int32_t pos = t < old ? old_positions[t] : first_new + (t - old);
    s.cache.append(0, k.data(), v.data(), 1, &pos);
  }
  s.q.resize(static_cast<std::size_t>(n) * n_heads * d);
  for (auto& x : s.q) x = dist(rng);
  for (int i = 0; i < n; ++i) s.query_positions.push_back(first_new + i);
  return s;
}

// Direct reference: probabilities[h][i][j] and outputs.
void reference(const Setup& s, int n, std::vector<std::vector<std::vector<double>>>& probs, std::vector<double>& out) {
  const auto& c = s.config;
  const int d = c.head_dim, group = c.n_heads / c.n_kv_heads;
  probs.assign(c.n_heads, {});
  out.assign(static_cast<std::size_t>(n) * c.n_heads * d, 0.0);
  for (int h = 0; h < c.n_heads; ++h) {
    const int g = h / group;
    const int m = s.cache.size(0, g);
    auto pos = s.cache.positions(0, g);
    for (int i = 0; i < n; ++i) {
      std::vector<double> p(m, 0.0);
      double mx = -1e300;
      for (int j = 0; j < m; ++j) {
        if (pos[j] > s.query_positions[i]) continue;
        double dot = 0;
        for (int t = 0; t < d; ++t) dot += double(s.q[(i * c.n_heads + h) * d + t]) * s.cache.key(0, g, j)[t];
        p[j] = dot / std::sqrt(double(d));
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (int j = 0; j < m; ++j) {
        p[j] = pos[j] > s.query_positions[i] ? 0.0 : std::exp(p[j] - mx);
        sum += p[j];
      }
      for (int j = 0; j < m; ++j) {
        p[j] /= sum;
        for (int t = 0; t < d; ++t) out[(i * c.n_heads + h) * d + t] += p[j] * s.cache.value(0, g, j)[t];
      }
      probs[h].push_back(p);
    }
  }
}

void check(int n_heads, int n_kv_heads, int n) {
  const int d = 16, window = 3;
  Setup s = make_setup(n_heads, n_kv_heads, d, n, 11 + n);
  observation::ObservationRequest req;
  req.window = window;
  req.column_sums = req.window_sums = req.window_rows = req.last_row = true;
  observation::AttentionObservation obs;
  obs.n_heads = n_heads;
  obs.n_kv_heads = n_kv_heads;
  std::vector<float> out(static_cast<std::size_t>(n) * n_heads * d);
  engine::AttentionInputs in{s.config, s.cache, 0, s.q.data(), n, s.query_positions.data()};
  engine::compute_attention(in, req, {}, obs, out.data());

  std::vector<std::vector<std::vector<double>>> probs;
  std::vector<double> ref_out;
  reference(s, n, probs, ref_out);
  for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == Approx(ref_out[i]).margin(1e-4));
  const int w = std::min(window, n);
  REQUIRE(obs.window == w);
  for (int h = 0; h < n_heads; ++h) {
    const int m = obs.keys_of(h);
    for (int j = 0; j < m; ++j) {
      double col = 0, wcol = 0;
      for (int i = 0; i < n; ++i) {
        col += probs[h][i][j];
        if (i >= n - w) {
          wcol += probs[h][i][j];
          REQUIRE(obs.window_rows[h][(i - (n - w)) * m + j] == Approx(probs[h][i][j]).margin(1e-5));
        }
      }
      REQUIRE(obs.column_sums[h][j] == Approx(col).margin(1e-4));
      REQUIRE(obs.window_sums[h][j] == Approx(wcol).margin(1e-4));
      REQUIRE(obs.last_row[h][j] == Approx(probs[h][n - 1][j]).margin(1e-5));
    }
  }
}

}  // namespace

TEST_CASE("prefill attention over a ragged cache matches the direct loop (GQA)") { check(6, 2, 70); }
TEST_CASE("prefill attention matches the direct loop (MHA, short step)") { check(3, 3, 5); }
TEST_CASE("decode attention matches the direct loop") {
  check(6, 2, 1);
  check(4, 4, 1);
}

TEST_CASE("narrowing an observation to a smaller window equals observing with that window") {
  const int n_heads = 6, n_kv = 2, d = 16, n = 40;
  Setup s = make_setup(n_heads, n_kv, d, n, 5);
  auto observe = [&](int window) {
    observation::ObservationRequest req;
    req.window = window;
    req.window_sums = req.window_rows = true;
    observation::AttentionObservation obs;
    obs.n_heads = n_heads;
    obs.n_kv_heads = n_kv;
    obs.query_positions = s.query_positions;
    std::vector<float> out(static_cast<std::size_t>(n) * n_heads * d);
    engine::AttentionInputs in{s.config, s.cache, 0, s.q.data(), n, s.query_positions.data()};
    engine::compute_attention(in, req, {}, obs, out.data());
    return obs;
  };
  const auto wide = observe(12), direct = observe(5);
  const auto narrow = observation::narrowed(wide, 5);
  REQUIRE(narrow.window == 5);
  for (int h = 0; h < n_heads; ++h) {
    REQUIRE(narrow.window_rows[h].size() == direct.window_rows[h].size());
    for (std::size_t j = 0; j < direct.window_rows[h].size(); ++j) REQUIRE(narrow.window_rows[h][j] == direct.window_rows[h][j]);
    for (std::size_t j = 0; j < direct.window_sums[h].size(); ++j)
      REQUIRE(narrow.window_sums[h][j] == Approx(direct.window_sums[h][j]).margin(1e-6));
  }
  REQUIRE_THROWS(observation::narrowed(direct, 12));
}
