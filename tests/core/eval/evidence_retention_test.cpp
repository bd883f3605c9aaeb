// Evidence retention against counts made by hand on small caches.
#include <catch2/catch.hpp>

#include <set>

#include "core/common/error.h"
#include "core/eval/evidence_retention.h"

using namespace kvscope::eval;

TEST_CASE("evidence positions are the union of the spans, sorted, each once") {
  const std::vector<EvidenceSpan> spans = {{7, 9, "needle value"}, {2, 3, "needle key"}, {8, 10, "needle value"}};
  CHECK(evidence_positions(spans) == std::vector<int>{2, 3, 7, 8, 9, 10});
  CHECK(evidence_positions({}).empty());
}

TEST_CASE("evidence retention counts the evidence tokens each (layer, KV head) holds") {
  const std::vector<int> positions = {2, 3, 7, 8};
  // layer 0: head 0 holds everything, head 1 lost 3 and 8; layer 1: head 0 holds only 7, head 1 nothing;
  // layer 2: everything.
  const std::set<std::tuple<int, int, int>> evicted = {{0, 1, 3}, {0, 1, 8}, {1, 0, 2}, {1, 0, 3}, {1, 0, 8},
                                                       {1, 1, 2}, {1, 1, 3}, {1, 1, 7}, {1, 1, 8}};
  const auto r = evidence_retention(positions, 3, 2, [&](int l, int h, int p) { return !evicted.count({l, h, p}); });
  CHECK(r.kept[0][0] == 1.0);
  CHECK(r.kept[0][1] == 0.5);
  CHECK(r.kept[1][0] == 0.25);
  CHECK(r.kept[1][1] == 0.0);
  CHECK(r.layer_kept == std::vector<double>{0.75, 0.125, 1.0});
  CHECK(r.mean == Approx((1.0 + 0.5 + 0.25 + 0.0 + 1.0 + 1.0) / 6));
  CHECK(r.min_layer == 1);
  CHECK(r.min_layer_kept == 0.125);
  CHECK(r.layers_mostly_lost == 1);
  CHECK_FALSE(r.mostly_lost());  // 1 of 3 layers
}

TEST_CASE("evidence lost in at least half the layers is mostly lost; no evidence is all kept") {
  const auto lost = evidence_retention({5}, 2, 1, [](int l, int, int) { return l == 0; });
  CHECK(lost.layers_mostly_lost == 1);
  CHECK(lost.mostly_lost());
  const auto none = evidence_retention({}, 2, 3, [](int, int, int) { return false; });
  CHECK(none.mean == 1.0);
  CHECK_FALSE(none.mostly_lost());
  CHECK_THROWS_AS(evidence_retention({1}, 0, 1, [](int, int, int) { return true; }), kvscope::Error);
}
