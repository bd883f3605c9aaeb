// KVCache edits: compaction, merges written out by hand, validation errors, memory accounting.
#include <catch2/catch.hpp>

#include <numeric>

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
