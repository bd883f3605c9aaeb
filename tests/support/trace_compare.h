#pragma once
// Field-by-field checks of recorded runs shared by the trace and run tests: events (scores equal, or both
// NaN), kept masks, and exact attention's q/k (bit for bit, whatever spans they arrived in).
#include <catch2/catch.hpp>
#include <cmath>

#include "core/trace/trace_view.h"

namespace kvscope::test {

inline void check_same_events_and_masks(const trace::RunTrace& got, const trace::RunTrace& want) {
  REQUIRE(got.events.size() == want.events.size());
  auto same = [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  int bad = 0;
  for (std::size_t i = 0; i < want.events.size(); ++i) {
    const auto& a = got.events[i];
    const auto& b = want.events[i];
    bad += a.step != b.step || a.phase != b.phase || a.layer != b.layer || a.kv_head != b.kv_head ||
           a.position != b.position || a.action != b.action || a.merge_target != b.merge_target ||
           !same(a.merge_weight, b.merge_weight) || !same(a.score, b.score) || !same(a.secondary_score, b.secondary_score);
  }
  CHECK(bad == 0);
  REQUIRE(got.kept_mask.size() == want.kept_mask.size());
  for (std::size_t l = 0; l < want.kept_mask.size(); ++l) CHECK(got.kept_mask[l] == want.kept_mask[l]);
}

inline void check_same_qk(const trace::RunTrace& got, const trace::RunTrace& want) {
  REQUIRE(got.qk.empty() == want.qk.empty());
  CHECK(got.qk_scale == want.qk_scale);
  if (want.qk.empty()) return;
  const std::size_t layers = want.qk.front()->layers.size();
  for (std::size_t l = 0; l < layers; ++l) {
    auto flat = [l](const trace::RunTrace& r) {
      trace::QKSpan::Layer all;
      for (const auto& span : r.qk) {
        const auto& part = span->layers.at(l);
        all.queries.insert(all.queries.end(), part.queries.begin(), part.queries.end());
        all.keys.insert(all.keys.end(), part.keys.begin(), part.keys.end());
        all.lse.insert(all.lse.end(), part.lse.begin(), part.lse.end());
      }
      return all;
    };
    const trace::QKSpan::Layer a = flat(got), b = flat(want);
    INFO("q/k of layer " << l);
    CHECK(a.queries == b.queries);
    CHECK(a.keys == b.keys);
    REQUIRE(a.lse.size() == b.lse.size());
    int bad = 0;
    for (std::size_t i = 0; i < b.lse.size(); ++i) bad += !(a.lse[i] == b.lse[i] || (std::isnan(a.lse[i]) && std::isnan(b.lse[i])));
    CHECK(bad == 0);
  }
}

}  // namespace kvscope::test
