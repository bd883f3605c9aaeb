// The CPU backend's attention (ragged cache, GQA, causal by original position, side outputs, streamed rows,
// float32, half and llama.cpp block storage) against a direct O(n^2) loop in double over the same stored rows.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/observation/attention_observation.h"
#include "kernels/backend.h"

using namespace kvscope;

namespace {

struct Setup {
  kernels::ModelShape config;
  cache::KVCache cache;
  std::vector<float> q;
  std::vector<int32_t> query_positions;
};

// Cache entries per KV head: an evicted-looking prefix (gappy positions) followed by the step's own n keys.
Setup make_setup(int n_heads, int n_kv_heads, int d, int n, unsigned seed,
                 kernels::KVCacheTypes type = kernels::CacheType::F32, int old = 6) {
  kernels::ModelShape c;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = d;
  c.n_layers = 1;
  Setup s{c, cache::KVCache(1, n_kv_heads, d, type), {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  // Old entries: positions 0, 2, 5, 9, ... (a compressed history), same for all heads for append's sake.
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

// Direct reference over the rows as stored (half rows widened, block rows dequantized by KVCache's copy, not
// by the kernels' in-register widening): probabilities[h][i][j], log-sum-exp[h][i] and
// outputs.
void reference(const Setup& s, int n, std::vector<std::vector<std::vector<double>>>& probs,
               std::vector<std::vector<double>>& lse, std::vector<double>& out) {
  const auto& c = s.config;
  const int d = c.head_dim, group = c.n_heads / c.n_kv_heads;
  probs.assign(c.n_heads, {});
  lse.assign(c.n_heads, {});
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
      lse[h].push_back(mx + std::log(sum));
      for (int j = 0; j < m; ++j) {
        p[j] /= sum;
        for (int t = 0; t < d; ++t) out[(i * c.n_heads + h) * d + t] += p[j] * s.cache.value(0, g, j)[t];
      }
      probs[h].push_back(p);
    }
  }
}

// Collects streamed rows into [head][query][key] (zero beyond a block's columns).
class CollectRows : public kernels::AttentionRowSink {
 public:
  CollectRows(int n_heads, int n, int m) : rows(n_heads, std::vector<std::vector<float>>(n, std::vector<float>(m, -1.0f))) {}
  void on_rows(int head, int first_row, int n_rows, int n_cols, const float* probs) override {
    for (int r = 0; r < n_rows; ++r) {
      auto& row = rows[head][first_row + r];
      std::fill(row.begin(), row.end(), 0.0f);
      std::copy(probs + static_cast<std::size_t>(r) * n_cols, probs + static_cast<std::size_t>(r + 1) * n_cols, row.begin());
    }
  }
  std::vector<std::vector<std::vector<float>>> rows;
};

observation::AttentionObservation attend(const Setup& s, int n, const observation::ObservationRequest& req,
                                         kernels::AttentionRowSink* rows, std::vector<float>& out) {
  observation::AttentionObservation obs;
  obs.n_heads = s.config.n_heads;
  obs.n_kv_heads = s.config.n_kv_heads;
  obs.query_positions = s.query_positions;
  out.assign(static_cast<std::size_t>(n) * s.config.n_heads * s.config.head_dim, 0.0f);
  kernels::default_cpu_backend().attention(s.cache.storage(), {0, s.config.n_heads, s.q.data(), n, s.query_positions.data()},
                                           req, rows, obs, out.data());
  return obs;
}

void check(int n_heads, int n_kv_heads, int n, kernels::KVCacheTypes type = kernels::CacheType::F32, int d = 16,
           int old = 6) {
  const int window = 3;
  Setup s = make_setup(n_heads, n_kv_heads, d, n, 11 + n, type, old);
  observation::ObservationRequest req;
  req.window = window;
  req.column_sums = req.window_sums = req.window_rows = req.last_row = req.log_sum_exp = req.rows = true;
  CollectRows rows(n_heads, n, s.cache.size(0, 0));
  std::vector<float> out;
  const auto obs = attend(s, n, req, &rows, out);

  std::vector<std::vector<std::vector<double>>> probs;
  std::vector<std::vector<double>> lse;
  std::vector<double> ref_out;
  reference(s, n, probs, lse, ref_out);
  for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == Approx(ref_out[i]).margin(1e-4));
  const int w = std::min(window, n);
  REQUIRE(obs.window == w);
  for (int h = 0; h < n_heads; ++h) {
    const int m = obs.keys_of(h);
    for (int i = 0; i < n; ++i) {
      REQUIRE(obs.log_sum_exp[h][i] == Approx(lse[h][i]).margin(1e-4));
      for (int j = 0; j < m; ++j) REQUIRE(rows.rows[h][i][j] == Approx(probs[h][i][j]).margin(1e-5));
    }
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
TEST_CASE("attention over a half-precision cache matches the direct loop over the stored rows") {
  check(6, 2, 70, kernels::CacheType::F16);
  check(6, 2, 1, kernels::CacheType::F16);
  check(3, 3, 1, kernels::CacheType::F16);
}
TEST_CASE("attention over a bfloat16 cache matches the direct loop over the stored rows") {
  check(6, 2, 70, kernels::CacheType::BF16);
  check(6, 2, 1, kernels::CacheType::BF16);
  check(3, 3, 1, kernels::CacheType::BF16);
}
TEST_CASE("decode attention for head sizes beyond one register block and not a multiple of 8") {
  for (auto type : {kernels::CacheType::F32, kernels::CacheType::F16, kernels::CacheType::BF16})
    for (int d : {72, 128, 12}) {
      INFO("head_dim " << d);
      check(6, 2, 1, type, d);
      check(4, 4, 9, type, d);
    }
}

TEST_CASE("attention over q8_0, q4_0 and q4_1 caches matches the direct loop over the dequantized rows") {
  using kernels::CacheType;
  for (CacheType type : {CacheType::Q8_0, CacheType::Q4_0, CacheType::Q4_1})
    for (int d : {32, 64, 96, 128}) {
      INFO("cache " << kernels::cache_type_name(type) << ", head_dim " << d);
      check(6, 2, 1, type, d);   // decode: the blocks read in place
      check(3, 3, 1, type, d);
      check(6, 2, 70, type, d);  // prefill: rows dequantized into scratch for BLAS
    }
  // Keys and values in different types, each read as stored.
  for (kernels::KVCacheTypes types : {kernels::KVCacheTypes(CacheType::Q8_0, CacheType::Q4_1),
                                      kernels::KVCacheTypes(CacheType::F16, CacheType::Q4_0),
                                      kernels::KVCacheTypes(CacheType::Q4_1, CacheType::F32)}) {
    INFO("cache " << kernels::cache_type_name(types));
    check(6, 2, 1, types, 64);
    check(6, 2, 9, types, 64);
  }
}

TEST_CASE("attention over a Hadamard-rotated cache matches the direct loop over the rows rotated back") {
  // The reference reads KVCache's rows (the model's frame: dequantized, then rotated back) with the unrotated
  // queries; the kernels read the rotated rows in place with rotated queries and rotate the output back. A
  // missing query rotation or back-rotation moves every score and output far beyond the margins.
  using kernels::CacheType;
  auto rotated = [](kernels::KVCacheTypes t, bool keys, bool values) {
    t.rotate_keys = keys;
    t.rotate_values = values;
    return t;
  };
  for (kernels::KVCacheTypes types : {rotated(CacheType::Q4_0, true, true), rotated(CacheType::Q8_0, true, true),
                                      rotated(CacheType::F32, true, true), rotated(CacheType::Q4_1, true, false),
                                      rotated(kernels::KVCacheTypes(CacheType::F16, CacheType::Q4_0), false, true),
                                      rotated(CacheType::KIVI4, true, true)})
    for (int d : {32, 64, 128}) {
      INFO("cache " << kernels::cache_type_name(types) << ", head_dim " << d);
      check(6, 2, 1, types, d);  // decode
      check(3, 3, 1, types, d);
      check(6, 2, 70, types, d);  // prefill
    }
}

TEST_CASE("attention over KIVI caches matches the direct loop over the dequantized rows") {
  using kernels::CacheType;
  // Small groups and residuals so that the cache holds quantized key groups, quantized value rows and
  // full-precision rows at once; 90 older entries appended one at a time.
  for (CacheType type : {CacheType::KIVI2, CacheType::KIVI4})
    for (const auto& [group, residual] : {std::pair{8, 4}, std::pair{32, 16}, std::pair{16, 0}})
      for (int d : {32, 64, 128}) {
        kernels::KVCacheTypes types(type);
        types.kivi = {group, residual};
        INFO("cache " << kernels::cache_type_name(types) << ", head_dim " << d);
        check(6, 2, 1, types, d, 90);   // decode: codes read in place
        check(3, 3, 1, types, d, 37);
        check(6, 2, 40, types, d, 50);  // prefill: rows dequantized into scratch for BLAS
      }
  for (kernels::KVCacheTypes types :
       {kernels::KVCacheTypes(CacheType::KIVI2, CacheType::Q8_0), kernels::KVCacheTypes(CacheType::F16, CacheType::KIVI4)}) {
    types.kivi = {8, 8};
    INFO("cache " << kernels::cache_type_name(types));
    check(6, 2, 1, types, 64, 60);
  }
}

TEST_CASE("KIVI's options are checked against the model's head_dim") {
  kernels::KVCacheTypes types(kernels::CacheType::KIVI2);
  types.kivi = {24, 16};
  REQUIRE_THROWS_WITH(cache::KVCache(1, 1, 64, types), Catch::Contains("KIVI group=24: a group must be a multiple of 8"));
  REQUIRE_THROWS_WITH(cache::KVCache(1, 1, 48, kernels::CacheType::KIVI4), Catch::Contains("head_dim 48 is not a multiple of 32"));
  REQUIRE_THROWS_WITH(kernels::parse_cache_types("kivi2:group=32,window=4"), Catch::Contains("unknown option 'window=4'"));
  REQUIRE_THROWS_WITH(kernels::parse_cache_types("q8_0:group=32"), Catch::Contains("only kivi2 and kivi4 take options"));
  REQUIRE_THROWS_WITH(kernels::parse_cache_types("f32", "kivi2:group=8", "kivi4:group=16"),
                      Catch::Contains("keys and values must share KIVI's options"));
  const auto parsed = kernels::parse_cache_types("f16", "kivi2:group=16,residual=64", "");
  REQUIRE(parsed.keys == kernels::CacheType::KIVI2);
  REQUIRE(parsed.values == kernels::CacheType::F16);
  REQUIRE(parsed.kivi == kernels::KiviOptions{16, 64});
  REQUIRE(kernels::cache_type_name(parsed) == "k=kivi2:group=16,residual=64,v=f16");
  REQUIRE(kernels::cache_type_name(kernels::parse_cache_types("kivi4")) == "kivi4");
}

TEST_CASE("a block cache type refuses a head_dim that is not a whole number of blocks") {
  REQUIRE_THROWS_WITH(cache::KVCache(1, 1, 48, kernels::CacheType::Q4_0),
                      "cache type q4_0 stores blocks of 32 values, but this model's head_dim 48 is not a multiple "
                      "of 32 (use f32, f16 or bf16)");
  REQUIRE_THROWS_WITH(cache::KVCache(1, 1, 16, kernels::KVCacheTypes(kernels::CacheType::F16, kernels::CacheType::Q8_0)),
                      Catch::Contains("cache type q8_0 stores blocks of 32 values"));
  REQUIRE_NOTHROW(cache::KVCache(1, 1, 48, kernels::CacheType::F16));
}

TEST_CASE("side outputs are only computed when asked for") {
  Setup s = make_setup(6, 2, 16, 9, 3);
  std::vector<float> out;
  const auto obs = attend(s, 9, {}, nullptr, out);
  CHECK(obs.column_sums.empty());
  CHECK(obs.window_sums.empty());
  CHECK(obs.window_rows.empty());
  CHECK(obs.last_row.empty());
  CHECK(obs.log_sum_exp.empty());
  CHECK(obs.window == 0);
  REQUIRE(obs.n_keys.size() == 2);
  CHECK(obs.n_keys[0] == s.cache.size(0, 0));
}

TEST_CASE("narrowing an observation to a smaller window equals observing with that window") {
  const int n_heads = 6, n_kv = 2, n = 40;
  Setup s = make_setup(n_heads, n_kv, 16, n, 5);
  auto observe = [&](int window) {
    observation::ObservationRequest req;
    req.window = window;
    req.window_sums = req.window_rows = true;
    std::vector<float> out;
    return attend(s, n, req, nullptr, out);
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
