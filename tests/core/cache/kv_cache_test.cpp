// KVCache edits: compaction, merges written out by hand, validation errors, memory accounting.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

#include "core/cache/kv_cache.h"
#include "core/common/error.h"

using namespace kvscope;

namespace {
// One layer, one KV head, head_dim 2; entry t has key (t, 10t) and value (-t, 100+t).
cache::KVCache filled(int n, int head_dim = 2) {
  cache::KVCache c(1, 1, head_dim);
  for (int t = 0; t < n; ++t) {
    std::vector<float> k(head_dim), v(head_dim);
    k[0] = t;
    v[0] = -t;
    if (head_dim > 1) {
      k[1] = 10.0f * t;
      v[1] = 100.0f + t;
    }
    int32_t pos = t;
    c.append(0, k.data(), v.data(), 1, &pos);
  }
  return c;
}
cache::CacheEdit edit_of(cache::HeadEdit h) {
  cache::CacheEdit e;
  e.heads.push_back(std::move(h));
  return e;
}
}  // namespace

TEST_CASE("keep compacts entries and preserves positions and order") {
  auto c = filled(8);
  cache::HeadEdit h;
  h.keep = {0, 3, 4, 7};
  c.apply(edit_of(h));
  REQUIRE(c.size(0, 0) == 4);
  auto pos = c.positions(0, 0);
  REQUIRE(std::vector<int32_t>(pos.begin(), pos.end()) == std::vector<int32_t>{0, 3, 4, 7});
  REQUIRE(c.key(0, 0, 1)[1] == 30.0f);
  REQUIRE(c.value(0, 0, 3)[1] == 107.0f);
}

TEST_CASE("a merge folds sources into the target with the given weights") {
  auto c = filled(6);
  cache::HeadEdit h;
  h.keep = {0, 2, 5};
  h.merges.push_back({2, {1, 3}, {0.5f, 0.3f, 0.2f}});
  c.apply(edit_of(h));
  REQUIRE(c.size(0, 0) == 3);
  // Target 2 (now entry 1): 0.5*k2 + 0.3*k1 + 0.2*k3.
  REQUIRE(c.key(0, 0, 1)[0] == Approx(0.5 * 2 + 0.3 * 1 + 0.2 * 3));
  REQUIRE(c.key(0, 0, 1)[1] == Approx(10 * (0.5 * 2 + 0.3 * 1 + 0.2 * 3)));
  REQUIRE(c.value(0, 0, 1)[1] == Approx(0.5 * 102 + 0.3 * 101 + 0.2 * 103));
  REQUIRE(c.merge_counts(0, 0)[1] == 3);
  REQUIRE(c.positions(0, 0)[1] == 2);
}

TEST_CASE("a value merge adds shares of a dropped value in order and leaves every key alone") {
  auto c = filled(5);
  cache::HeadEdit h;
  h.keep = {0, 3, 4};
  // 1 gives half its value to 2 and 3; then 2 (carrying 1's half) gives all of it to 4.
  h.value_merges = {{1, {2, 3}, 0.5f}, {2, {4}, 1.0f}};
  c.apply(edit_of(h));
  REQUIRE(c.size(0, 0) == 3);
  // By hand: v1 = (-1, 101), v2 = (-2, 102) + v1 / 2 = (-2.5, 152.5); v3 += v1 / 2; v4 += v2.
  CHECK(c.value(0, 0, 1)[0] == Approx(-3.5));
  CHECK(c.value(0, 0, 1)[1] == Approx(153.5));
  CHECK(c.value(0, 0, 2)[0] == Approx(-6.5));
  CHECK(c.value(0, 0, 2)[1] == Approx(256.5));
  CHECK(c.value(0, 0, 0)[0] == 0.0f);
  for (int i = 0; i < 3; ++i) CHECK(c.key(0, 0, i)[1] == 10.0f * c.key(0, 0, i)[0]);  // keys as appended
  CHECK(c.key(0, 0, 1)[0] == 3.0f);

  // A kept source, a source named twice and a target that is the source are refused, and nothing changes.
  auto d = filled(4);
  for (const auto& bad : std::vector<std::vector<cache::ValueMerge>>{
           {{0, {1}, 0.5f}}, {{2, {1}, 0.5f}, {2, {3}, 0.5f}}, {{2, {2}, 0.5f}}}) {
    cache::HeadEdit e;
    e.keep = {0, 1, 3};
    e.value_merges = bad;
    CHECK_THROWS_WITH(d.apply(edit_of(e)), Catch::Contains("value merge"));
    CHECK(d.size(0, 0) == 4);
    CHECK(d.value(0, 0, 1)[0] == -1.0f);
  }
}

TEST_CASE("invalid edits are rejected with a message") {
  auto c = filled(5);
  auto reject = [&](cache::HeadEdit h, const char* fragment) {
    try {
      c.apply(edit_of(std::move(h)));
      FAIL("edit accepted");
    } catch (const Error& e) {
      REQUIRE_THAT(e.what(), Catch::Contains(fragment));
    }
  };
  cache::HeadEdit out_of_range;
  out_of_range.keep = {0, 5};
  reject(out_of_range, "out of range");
  cache::HeadEdit duplicate;
  duplicate.keep = {1, 1};
  reject(duplicate, "strictly increasing");
  cache::HeadEdit bad_sum;
  bad_sum.keep = {0, 1};
  bad_sum.merges.push_back({1, {2}, {0.5f, 0.6f}});
  reject(bad_sum, "sum to");
  cache::HeadEdit nan_weight;
  nan_weight.keep = {0, 1};
  nan_weight.merges.push_back({1, {2}, {std::nanf(""), 1.0f}});
  reject(nan_weight, "finite");
  cache::HeadEdit kept_source;
  kept_source.keep = {0, 1};
  kept_source.merges.push_back({1, {0}, {0.5f, 0.5f}});
  reject(kept_source, "kept or merged");
  cache::HeadEdit bad_layer;
  bad_layer.layer = 3;
  reject(bad_layer, "no such layer");
  REQUIRE(c.size(0, 0) == 5);  // nothing applied
}

TEST_CASE("evicting really gives memory back; peak remembers the full size") {
  auto c = filled(1000, 64);
  const std::size_t full = c.bytes();
  REQUIRE(full >= 1000u * 64 * 2 * sizeof(float));
  cache::HeadEdit h;
  h.keep.resize(100);
  std::iota(h.keep.begin(), h.keep.end(), 900);
  c.apply(edit_of(h));
  REQUIRE(c.bytes() < full / 5);
  REQUIRE(c.peak_bytes() == full);
  REQUIRE(c.layer_peak_bytes(0) == full);
  REQUIRE(c.size(0, 0) == 100);
  REQUIRE(c.positions(0, 0)[0] == 900);
}

namespace {
// Random rows of a given scale, [n][n_kv_heads][head_dim].
std::vector<float> random_rows(std::size_t count, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> rows(count);
  for (auto& x : rows) x = dist(rng);
  return rows;
}

// A random edit of one head: every third entry evicted, some of the rest merged into a kept neighbour.
cache::HeadEdit random_edit(int layer, int kv_head, int size, std::mt19937& rng) {
  cache::HeadEdit h;
  h.layer = layer;
  h.kv_head = kv_head;
  std::vector<int32_t> sources;
  for (int i = 0; i < size; ++i) (i % 3 == 1 ? sources : h.keep).push_back(i);
  std::uniform_real_distribution<float> share(0.1f, 1.0f);
  for (std::size_t s = 0; s + 1 < sources.size(); s += 2) {
    const float a = share(rng), b = share(rng), c = share(rng), total = a + b + c;
    h.merges.push_back({sources[s] - 1, {sources[s], sources[s + 1]}, {a / total, b / total, c / total}});
  }
  return h;
}

// How far a stored element may be from the exact value x, element t of its row (the whole row given).
using Tolerance = std::function<double(const std::vector<double>& row, int t)>;

Tolerance relative(double relative_tolerance) {
  return [relative_tolerance](const std::vector<double>& row, int t) {
    return relative_tolerance * std::abs(row[t]) + 1e-6;
  };
}

// A block format's largest error for element t: half a step of its 32-value block (a whole step for q4_0's
// capped code, where the value of largest magnitude is positive), plus the rounding of the scale (and minimum)
// to half.
Tolerance block_format(kernels::CacheType type) {
  return [type](const std::vector<double>& row, int t) {
    const int first = t / 32 * 32;
    double lo = row[first], hi = row[first], amax = 0.0;
    for (int j = first; j < first + 32; ++j) {
      lo = std::min(lo, row[j]);
      hi = std::max(hi, row[j]);
      amax = std::max(amax, std::abs(row[j]));
    }
    const double half_rounding = std::ldexp(1.0, -11);
    switch (type) {
      case kernels::CacheType::Q8_0: return amax / 127 * 0.5 + amax * half_rounding + 1e-6;
      case kernels::CacheType::Q4_0: return amax / 8 + amax * half_rounding + 1e-6;
      default: return (hi - lo) / 15 * 0.5 + (hi - lo) * half_rounding + std::abs(lo) * half_rounding + 1e-6;
    }
  };
}

void check_edit_against_direct_loop(kernels::CacheType type, const Tolerance& tolerance, int d = 67) {
  const int layers = 2, heads = 3, n = 40;  // d = 67 is not a multiple of 8: the vector loops' tails run too
  std::mt19937 rng(7);
  cache::KVCache c(layers, heads, d, type);
  std::vector<int32_t> positions(n);
  std::iota(positions.begin(), positions.end(), 0);
  for (int l = 0; l < layers; ++l) {
    const auto k = random_rows(static_cast<std::size_t>(n) * heads * d, rng, 3.0f);
    const auto v = random_rows(k.size(), rng, 0.5f);
    c.append(l, k.data(), v.data(), n, positions.data());
  }
  // The rows as stored (half rows widened) before the edit, and the edit applied by a direct loop in double.
  cache::CacheEdit edit;
  std::vector<std::vector<double>> expected_keys, expected_values;
  for (int l = 0; l < layers; ++l)
    for (int g = 0; g < heads; ++g) {
      const auto keys = c.keys(l, g), values = c.values(l, g);
      cache::HeadEdit h = random_edit(l, g, n, rng);
      std::vector<double> ek, ev;
      for (int32_t i : h.keep) {
        std::vector<double> rk(keys.begin() + i * d, keys.begin() + (i + 1) * d);
        std::vector<double> rv(values.begin() + i * d, values.begin() + (i + 1) * d);
        for (const auto& m : h.merges) {
          if (m.target != i) continue;
          for (int t = 0; t < d; ++t) {
            rk[t] = m.weights[0] * keys[i * d + t];
            rv[t] = m.weights[0] * values[i * d + t];
            for (std::size_t s = 0; s < m.sources.size(); ++s) {
              rk[t] += m.weights[s + 1] * keys[m.sources[s] * d + t];
              rv[t] += m.weights[s + 1] * values[m.sources[s] * d + t];
            }
          }
        }
        ek.insert(ek.end(), rk.begin(), rk.end());
        ev.insert(ev.end(), rv.begin(), rv.end());
      }
      expected_keys.push_back(ek);
      expected_values.push_back(ev);
      edit.heads.push_back(std::move(h));
    }
  c.apply(edit);
  for (int l = 0, index = 0; l < layers; ++l)
    for (int g = 0; g < heads; ++g, ++index) {
      const auto& h = edit.heads[index];
      REQUIRE(c.size(l, g) == static_cast<int>(h.keep.size()));
      for (std::size_t e = 0; e < h.keep.size(); ++e) REQUIRE(c.positions(l, g)[e] == h.keep[e]);
      const auto keys = c.keys(l, g), values = c.values(l, g);
      for (std::size_t e = 0; e < h.keep.size(); ++e) {
        const std::vector<double> key_row(expected_keys[index].begin() + e * d,
                                          expected_keys[index].begin() + (e + 1) * d);
        const std::vector<double> value_row(expected_values[index].begin() + e * d,
                                            expected_values[index].begin() + (e + 1) * d);
        for (int t = 0; t < d; ++t) {
          REQUIRE(std::abs(keys[e * d + t] - key_row[t]) <= tolerance(key_row, t));
          REQUIRE(std::abs(values[e * d + t] - value_row[t]) <= tolerance(value_row, t));
        }
      }
    }
}
}  // namespace

TEST_CASE("random gathers and merges equal a direct loop (float32 cache)") {
  check_edit_against_direct_loop(kernels::CacheType::F32, relative(1e-6));
}

TEST_CASE("random gathers and merges equal a direct loop (half cache: merged in float32, rounded once)") {
  // One rounding to half: relative error at most 2^-11 for normal values, plus float32 accumulation.
  check_edit_against_direct_loop(kernels::CacheType::F16, relative(std::ldexp(1.0, -11) + 1e-6));
}

TEST_CASE("random gathers and merges equal a direct loop (bfloat16 cache: merged in float32, rounded once)") {
  // One rounding to bfloat16: relative error at most 2^-8.
  check_edit_against_direct_loop(kernels::CacheType::BF16, relative(std::ldexp(1.0, -8) + 1e-6));
}

TEST_CASE("random gathers and merges on block caches: dequantized, merged in float32, quantized once") {
  using kernels::CacheType;
  for (CacheType type : {CacheType::Q8_0, CacheType::Q4_0, CacheType::Q4_1}) {
    INFO("cache " << kernels::cache_type_name(type));
    check_edit_against_direct_loop(type, block_format(type), 96);
  }
}

TEST_CASE("a block cache's entries take payload and scales, and eviction gives whole entries back") {
  using kernels::CacheType;
  const int d = 64, n = 300;
  std::mt19937 rng(5);
  const auto k = random_rows(static_cast<std::size_t>(n) * 2 * d, rng, 2.0f);
  std::vector<int32_t> positions(n);
  std::iota(positions.begin(), positions.end(), 0);
  // Bytes of a key row plus a value row: llama.cpp's block sizes (half scale, half minimum, codes).
  for (const auto& [types, entry] : {std::pair{kernels::KVCacheTypes(CacheType::Q8_0), 2 * 2 * (2 + 32)},
                                     std::pair{kernels::KVCacheTypes(CacheType::Q4_0), 2 * 2 * (2 + 16)},
                                     std::pair{kernels::KVCacheTypes(CacheType::Q4_1), 2 * 2 * (2 + 2 + 16)},
                                     std::pair{kernels::KVCacheTypes(CacheType::Q8_0, CacheType::F16), 2 * 34 + 2 * d}}) {
    INFO("cache " << kernels::cache_type_name(types));
    cache::KVCache c(1, 2, d, types);
    c.append(0, k.data(), k.data(), n, positions.data());
    CHECK(c.entry_bytes() == static_cast<std::size_t>(2 * n * entry));
    CHECK(c.bytes() == c.entry_bytes());  // a prefill reserves exactly
    cache::CacheEdit edit;
    for (int g = 0; g < 2; ++g) {
      cache::HeadEdit h{0, g, {}, {}, {}, {}, {}};
      for (int i = 0; i < n; i += 10) h.keep.push_back(i);
      edit.heads.push_back(h);
    }
    const auto before = std::vector<float>(c.keys(0, 1).begin(), c.keys(0, 1).end());
    c.apply(edit);
    CHECK(c.entry_bytes() == static_cast<std::size_t>(2 * (n / 10) * entry));
    CHECK(c.bytes() < c.peak_bytes() / 4);  // the slack went back
    // The kept rows read back unchanged: their blocks moved whole.
    for (int e = 0; e < n / 10; ++e)
      for (int t = 0; t < d; ++t) REQUIRE(c.keys(0, 1)[e * d + t] == before[e * 10 * d + t]);
  }
}

TEST_CASE("a half cache stores each value rounded to the nearest half and reads it back as float") {
  const int d = 67, n = 5;
  std::mt19937 rng(3);
  cache::KVCache c(1, 1, d, kernels::CacheType::F16);
  auto k = random_rows(static_cast<std::size_t>(n) * d, rng, 20.0f);
  auto v = random_rows(k.size(), rng, 1e-3f);
  k[0] = 70000.0f;  // beyond the largest half: infinity, as IEEE rounding says
  std::vector<int32_t> positions = {0, 1, 2, 3, 4};
  c.append(0, k.data(), v.data(), n, positions.data());
  const auto keys = c.keys(0, 0), values = c.values(0, 0);
  REQUIRE(std::isinf(keys[0]));
  for (std::size_t i = 1; i < k.size(); ++i) {
    // A correctly rounded half is within half a unit in the last place: 2^-11 relative for normal values.
    REQUIRE(std::abs(keys[i] - k[i]) <= std::ldexp(std::abs(k[i]), -11));
    if (std::abs(v[i]) >= std::ldexp(1.0f, -14)) REQUIRE(std::abs(values[i] - v[i]) <= std::ldexp(std::abs(v[i]), -11));
    else REQUIRE(std::abs(values[i] - v[i]) <= std::ldexp(1.0f, -25));  // subnormal halves: absolute 2^-25
  }
  // Half the bytes of a float32 cache of the same entries.
  cache::KVCache f32(1, 1, d);
  f32.append(0, k.data(), v.data(), n, positions.data());
  CHECK(c.entry_bytes() * 2 == f32.entry_bytes());
  CHECK(c.bytes() * 2 == f32.bytes());
}

TEST_CASE("a KIVI cache: eviction keeps survivors' codes and frees emptied groups; merges re-quantize their group") {
  using kernels::CacheType;
  const int d = 64, n = 100, group = 8, residual = 8;
  std::mt19937 rng(37);
  const auto k = random_rows(static_cast<std::size_t>(n) * d, rng, 2.0f);
  const auto v = random_rows(k.size(), rng, 1.0f);
  std::vector<int32_t> positions(n);
  std::iota(positions.begin(), positions.end(), 0);
  for (CacheType type : {CacheType::KIVI2, CacheType::KIVI4}) {
    INFO("cache " << kernels::cache_type_name(type));
    const int bits = type == CacheType::KIVI2 ? 2 : 4;
    kernels::KVCacheTypes types(type);
    types.kivi = {group, residual};
    cache::KVCache c(1, 1, d, types);
    c.append(0, k.data(), v.data(), n, positions.data());
    // Keys: R + G = 16 > 100 - 88, so 11 groups of 8 and 12 full-precision rows; values: 92 rows and 8.
    const std::size_t key_group = 2 * 2 * d + group * d * bits / 8, value_row = 2 * 2 * (d / group) + d * bits / 8;
    CHECK(c.entry_bytes() == 11 * key_group + 12 * 4 * d + 92 * value_row + 8 * 4 * d);
    CHECK(c.entry_bytes() == c.full_cache_bytes(n));
    const std::vector<float> keys_before(c.keys(0, 0).begin(), c.keys(0, 0).end());
    const std::vector<float> values_before(c.values(0, 0).begin(), c.values(0, 0).end());
    // The full-precision rows are the appended ones; quantized ones moved.
    for (int t = 0; t < d; ++t) REQUIRE(keys_before[(n - 1) * d + t] == k[(n - 1) * d + t]);
    REQUIRE(keys_before[0] != k[0]);

    // Evict: every third entry kept, plus all of group 2 (entries 16..23); group 4 (32..39) emptied.
    cache::HeadEdit h{0, 0, {}, {}, {}, {}, {}};
    for (int i = 0; i < n; ++i)
      if ((i % 3 == 0 || (i >= 16 && i < 24)) && !(i >= 32 && i < 40)) h.keep.push_back(i);
    std::vector<int> survivors(11, 0);
    int kept_residual = 0, kept_quantized_values = 0;
    for (int32_t i : h.keep) {
      if (i < 88) ++survivors[i / group]; else ++kept_residual;
      if (i < 92) ++kept_quantized_values;
    }
    std::size_t expected_keys = kept_residual * 4 * d;
    for (int s : survivors)
      if (s > 0) expected_keys += 2 * 2 * d + s * d * bits / 8;
    const std::size_t expected_values = kept_quantized_values * value_row + (h.keep.size() - kept_quantized_values) * 4 * d;
    c.apply({{h}});
    CHECK(c.entry_bytes() == expected_keys + expected_values);
    REQUIRE(c.size(0, 0) == static_cast<int>(h.keep.size()));
    for (std::size_t e = 0; e < h.keep.size(); ++e)
      for (int t = 0; t < d; ++t) {
        REQUIRE(c.keys(0, 0)[e * d + t] == keys_before[h.keep[e] * d + t]);
        REQUIRE(c.values(0, 0)[e * d + t] == values_before[h.keep[e] * d + t]);
      }

    // Appends after the eviction follow the residual rule again, and bytes stay the sum of the parts.
    const int32_t next = n;
    c.append(0, k.data(), v.data(), 1, &next);
    const int size = c.size(0, 0);
    REQUIRE(size == static_cast<int>(h.keep.size()) + 1);

    // Merge entry 1 (in the first surviving key group) and entry size-1 (full precision) with their neighbours.
    const std::vector<float> keys_mid(c.keys(0, 0).begin(), c.keys(0, 0).end());
    const std::vector<float> values_mid(c.values(0, 0).begin(), c.values(0, 0).end());
    cache::HeadEdit m{0, 0, {}, {}, {}, {}, {}};
    for (int i = 0; i < size; ++i)
      if (i != 2 && i != size - 2) m.keep.push_back(i);
    m.merges.push_back({1, {2}, {0.5f, 0.5f}});
    m.merges.push_back({size - 1, {size - 2}, {0.25f, 0.75f}});
    c.apply({{m}});
    const auto keys = c.keys(0, 0), values = c.values(0, 0);
    double key_range = 0.0;
    for (int t = 0; t < d; ++t) {
      double lo = 1e30, hi = -1e30;
      for (int e = 0; e < group; ++e) {
        lo = std::min(lo, double(keys_mid[e * d + t]));
        hi = std::max(hi, double(keys_mid[e * d + t]));
      }
      key_range = std::max(key_range, hi - lo);
    }
    for (int t = 0; t < d; ++t) {
      const double merged_key = 0.5 * keys_mid[1 * d + t] + 0.5 * keys_mid[2 * d + t];
      // Re-quantized with its group: within one step of the group's range (half a step plus the halves' rounding).
      REQUIRE(std::abs(keys[1 * d + t] - merged_key) <= key_range / ((1 << bits) - 1) + 1e-2);
      // The full-precision merge is exact in float32.
      const double last = 0.25 * keys_mid[(size - 1) * d + t] + 0.75 * keys_mid[(size - 2) * d + t];
      REQUIRE(keys[(m.keep.size() - 1) * d + t] == Approx(last).margin(1e-6));
      const double last_value = 0.25 * values_mid[(size - 1) * d + t] + 0.75 * values_mid[(size - 2) * d + t];
      REQUIRE(values[(m.keep.size() - 1) * d + t] == Approx(last_value).margin(1e-6));
    }
    // Rows of key groups no merge touched are unchanged.
    for (std::size_t e = survivors[0] - 1; e + 1 < m.keep.size() && m.keep[e] < 40; ++e)
      for (int t = 0; t < d; ++t) REQUIRE(keys[e * d + t] == keys_mid[m.keep[e] * d + t]);
  }
}

TEST_CASE("bytes, paged bytes and their peaks, kept per layer between appends and edits, equal a count of every layer") {
  // KVCache counts again only the layers an append or edit touched; here every layer is counted after each step
  // (layer_bytes, layer_paged_bytes) and the totals and peaks followed by hand, as the cache did before.
  using kernels::CacheType;
  const int layers = 3, heads = 2, d = 64, page = 16;
  kernels::KVCacheTypes kivi(CacheType::KIVI2);
  kivi.kivi = {16, 16};
  for (const kernels::KVCacheTypes& type : {kernels::KVCacheTypes(CacheType::F32), kernels::KVCacheTypes(CacheType::Q8_0), kivi}) {
    INFO("cache " << kernels::cache_type_name(type));
    std::mt19937 rng(38);
    cache::KVCache c(layers, heads, d, type);
    c.follow_paged_peak(page);
    std::size_t peak = 0, paged_peak = 0;
    std::vector<std::size_t> layer_peak(layers, 0), layer_paged_peak(layers, 0);
    std::vector<int32_t> next(layers, 0);
    auto check_counts = [&](const std::string& step) {
      INFO(step);
      std::size_t total = 0, paged = 0;
      for (int l = 0; l < layers; ++l) {
        total += c.layer_bytes(l);
        paged += c.layer_paged_bytes(l, page);
        layer_peak[l] = std::max(layer_peak[l], c.layer_bytes(l));
        layer_paged_peak[l] = std::max(layer_paged_peak[l], c.layer_paged_bytes(l, page));
        REQUIRE(c.layer_peak_bytes(l) == layer_peak[l]);
        REQUIRE(c.layer_paged_peak_bytes(l) == layer_paged_peak[l]);
      }
      peak = std::max(peak, total);
      paged_peak = std::max(paged_peak, paged);
      REQUIRE(c.bytes() == total);
      REQUIRE(c.peak_bytes() == peak);
      REQUIRE(c.paged_bytes(page) == paged);
      REQUIRE(c.paged_peak_bytes() == paged_peak);
    };
    std::uniform_int_distribution<int> pick_layer(0, layers - 1), pick_count(1, 23);
    for (int step = 0; step < 40; ++step) {
      const int l = pick_layer(rng), n = pick_count(rng);
      if (step % 4 == 3) {
        // Evict every third entry of one head of layer l, and half of every head of the next layer: one edit, two layers.
        cache::CacheEdit edit;
        for (const auto& [layer, g, every] : {std::tuple{l, step % heads, 3}, std::tuple{(l + 1) % layers, 0, 2},
                                              std::tuple{(l + 1) % layers, 1, 2}}) {
          cache::HeadEdit h{layer, g, {}, {}, {}, {}, {}};
          for (int i = 0; i < c.size(layer, g); ++i)
            if (i % every != 1) h.keep.push_back(i);
          edit.heads.push_back(std::move(h));
        }
        c.apply(edit);
        check_counts("edit at step " + std::to_string(step));
      } else {
        const auto k = random_rows(static_cast<std::size_t>(n) * heads * d, rng, 1.0f);
        std::vector<int32_t> positions(n);
        std::iota(positions.begin(), positions.end(), next[l]);
        next[l] += n;
        c.append(l, k.data(), k.data(), n, positions.data());
        check_counts("append of " + std::to_string(n) + " to layer " + std::to_string(l) + " at step " + std::to_string(step));
      }
    }
  }
}
