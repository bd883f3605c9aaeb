// The per-policy 2 x 2 of evidence (kept / lost) x answer (correct / wrong), against counts made by hand and
// the bootstrap of the same indicators.
#include <catch2/catch.hpp>

#include "core/eval/retention_table.h"

using namespace kvscope::eval;

TEST_CASE("the 2 x 2 counts each sample once and gives each cell's share with its interval") {
  // 3 lost & wrong, 1 kept & wrong, 4 kept & correct, 2 lost & correct.
  std::vector<RetentionOutcome> o;
  for (int i = 0; i < 3; ++i) o.push_back({true, false});
  o.push_back({false, false});
  for (int i = 0; i < 4; ++i) o.push_back({false, true});
  for (int i = 0; i < 2; ++i) o.push_back({true, true});
  const BootstrapSettings settings;
  const RetentionTable t = retention_table(o, settings);
  CHECK(t.samples == 10);
  CHECK(t.cells[1][0].count == 3);
  CHECK(t.cells[0][0].count == 1);
  CHECK(t.cells[0][1].count == 4);
  CHECK(t.cells[1][1].count == 2);
  CHECK(t.cells[1][0].share.mean == Approx(0.3));
  const Interval expected = bootstrap_mean({1, 1, 1, 0, 0, 0, 0, 0, 0, 0}, settings);
  CHECK(t.cells[1][0].share.low == expected.low);
  CHECK(t.cells[1][0].share.high == expected.high);
  REQUIRE(t.failures_lost);
  CHECK(t.failures_lost->mean == Approx(0.75));  // 3 of the 4 failures
  CHECK(t.failures_lost->n == 4);
  const Interval failures = bootstrap_mean({1, 1, 1, 0}, settings);
  CHECK(t.failures_lost->low == failures.low);
  REQUIRE(t.correct_lost);
  CHECK(t.correct_lost->mean == Approx(2.0 / 6));
  const std::string sentence = failures_sentence("snapkv", t, settings.level);
  CHECK(sentence.rfind("of snapkv's failures, 75 % had lost the evidence in at least half the layers [", 0) == 0);
}

TEST_CASE("the 2 x 2 without failures or samples says so instead of inventing shares") {
  const RetentionTable none = retention_table({}, {});
  CHECK(none.samples == 0);
  CHECK_FALSE(none.failures_lost);
  const RetentionTable all_right = retention_table({{false, true}, {true, true}}, {});
  CHECK_FALSE(all_right.failures_lost);
  CHECK(failures_sentence("full", all_right, 0.95).find("no failures") != std::string::npos);
}

TEST_CASE("one rule decides correct for every evaluation, and what --traces-for failed keeps") {
  CHECK(answer_correct(1.0));
  CHECK(answer_correct(0.5));
  CHECK_FALSE(answer_correct(0.49));
  CHECK(sample_failed(0.0, "a", "a"));
  CHECK(sample_failed(1.0, "a", "b"));  // right, but not what the full cache said
  CHECK_FALSE(sample_failed(1.0, "a", "a"));
}
