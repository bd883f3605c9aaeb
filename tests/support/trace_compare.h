#pragma once
// Field-by-field checks of recorded runs shared by the trace and run tests: events (scores equal, or both
// NaN) and kept masks.
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

}  // namespace kvscope::test
