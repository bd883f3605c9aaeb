// keep_top_scores, pool1d and reduce_group against small cases worked out by hand.
#include "core/policy/selection.h"

#include <catch2/catch.hpp>
#include <vector>

#include "core/common/error.h"

using namespace kvscope;
using namespace kvscope::policy;

TEST_CASE("keep_top_scores keeps sinks, recent entries and the highest scores", "[selection]") {
  //                     0    1    2    3    4    5    6    7    8    9
  const std::vector<float> s = {0.0f, 9.0f, 1.0f, 8.0f, 2.0f, 7.0f, 3.0f, 0.5f, 0.1f, 0.2f};
  // budget 5, 1 sink (0), 2 recent (8, 9): two more from 1..7 by score: 1 (9.0) and 3 (8.0).
  CHECK(keep_top_scores(s, 5, 1, 2) == std::vector<int32_t>{0, 1, 3, 8, 9});
  // No protection: the five highest are 1, 3, 5, 6, 4.
  CHECK(keep_top_scores(s, 5, 0, 0) == std::vector<int32_t>{1, 3, 4, 5, 6});
  // Sinks and recent fill the budget: no score is read.
  CHECK(keep_top_scores(s, 4, 2, 2) == std::vector<int32_t>{0, 1, 8, 9});
  // Sinks beyond the budget are clamped first, then recent.
  CHECK(keep_top_scores(s, 3, 5, 5) == std::vector<int32_t>{0, 1, 2});
  CHECK(keep_top_scores(s, 3, 1, 5) == std::vector<int32_t>{0, 8, 9});
}

TEST_CASE("keep_top_scores keeps everything when the budget covers the entries", "[selection]") {
  const std::vector<float> s = {3.0f, 1.0f, 2.0f};
  CHECK(keep_top_scores(s, 3, 0, 0) == std::vector<int32_t>{0, 1, 2});
  CHECK(keep_top_scores(s, 10, 1, 1) == std::vector<int32_t>{0, 1, 2});
  CHECK(keep_top_scores(s, 0, 0, 0).empty());
}

TEST_CASE("keep_top_scores breaks ties toward the earlier entry", "[selection]") {
  const std::vector<float> s = {1.0f, 5.0f, 5.0f, 5.0f, 1.0f};
  CHECK(keep_top_scores(s, 2, 0, 0) == std::vector<int32_t>{1, 2});
  const std::vector<float> flat(6, 0.0f);
  CHECK(keep_top_scores(flat, 3, 0, 1) == std::vector<int32_t>{0, 1, 5});
}

TEST_CASE("keep_top_scores_across_heads shares a layer's budget over its heads (AdaKV)", "[selection]") {
  // Two heads of 6 entries, budget 3 each: 6 entries for the layer. Head 0's scores are all higher than head
  // 1's, so without a safeguard head 0 keeps 5 (its best) and head 1 only its one protected recent entry.
  const std::vector<std::vector<double>> s = {{9, 8, 7, 6, 5, 0}, {1, 0.5, 0.4, 0.3, 0.2, 0.1}};
  auto keep = keep_top_scores_across_heads(s, 3, 0, 1, 0);
  CHECK(keep[0] == std::vector<int32_t>{0, 1, 2, 3, 5});
  CHECK(keep[1] == std::vector<int32_t>{5});
  // A safeguard of 2: each head first keeps 2 entries, its recent one (5) and its best other (0); the other 2
  // of the layer's 6 go by score across heads, to head 0's entries 1 (8) and 2 (7).
  keep = keep_top_scores_across_heads(s, 3, 0, 1, 2);
  CHECK(keep[0] == std::vector<int32_t>{0, 1, 2, 5});
  CHECK(keep[1] == std::vector<int32_t>{0, 5});
  // Everything stays when the heads hold no more than heads x budget together, whatever their own lengths.
  keep = keep_top_scores_across_heads({{1, 2, 3, 4}, {1, 2}}, 3, 0, 0, 1);
  CHECK(keep[0] == std::vector<int32_t>{0, 1, 2, 3});
  CHECK(keep[1] == std::vector<int32_t>{0, 1});
  // Equal scores across heads: the lower head first, then the earlier entry.
  keep = keep_top_scores_across_heads({{1, 1, 1}, {1, 1, 1}}, 2, 0, 0, 0);
  CHECK(keep[0] == std::vector<int32_t>{0, 1, 2});
  CHECK(keep[1] == std::vector<int32_t>{0});
}

TEST_CASE("pool1d average counts the zero padding in the divisor", "[selection]") {
  const std::vector<float> x = {1, 2, 3, 4, 5};
  // kernel 3, padding 1: [0+1+2, 1+2+3, 2+3+4, 3+4+5, 4+5+0] / 3
  const auto avg = pool1d(x, 3, Pooling::Avg);
  const std::vector<float> want = {3.0f / 3, 6.0f / 3, 9.0f / 3, 12.0f / 3, 9.0f / 3};
  REQUIRE(avg.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(avg[i] == Approx(want[i]));
  // kernel 5, padding 2, on 4 values: sums 1+2+3, 1+2+3+4, 1+2+3+4, 2+3+4 over 5.
  const auto avg5 = pool1d(std::vector<float>{1, 2, 3, 4}, 5, Pooling::Avg);
  CHECK(avg5[0] == Approx(6.0f / 5));
  CHECK(avg5[1] == Approx(10.0f / 5));
  CHECK(avg5[2] == Approx(10.0f / 5));
  CHECK(avg5[3] == Approx(9.0f / 5));
}

TEST_CASE("pool1d max takes the largest neighbour, none copies", "[selection]") {
  const std::vector<float> x = {0.1f, 0.9f, 0.2f, 0.05f, 0.3f, 0.0f};
  CHECK(pool1d(x, 3, Pooling::Max) == std::vector<float>{0.9f, 0.9f, 0.9f, 0.3f, 0.3f, 0.3f});
  CHECK(pool1d(x, 5, Pooling::Max) == std::vector<float>{0.9f, 0.9f, 0.9f, 0.9f, 0.3f, 0.3f});
  CHECK(pool1d(x, 7, Pooling::None) == x);
  CHECK(pool1d(x, 1, Pooling::Avg) == x);
  CHECK(pool1d(std::vector<float>{}, 3, Pooling::Avg).empty());
  CHECK_THROWS_AS(pool1d(x, 4, Pooling::Avg), UsageError);
}

TEST_CASE("reduce_group combines the query heads of one KV head", "[selection]") {
  // 6 query heads, group 3: KV head 1 reads heads 3, 4, 5.
  const std::vector<std::vector<float>> heads = {
      {9, 9}, {9, 9}, {9, 9}, {1, 6}, {2, 0}, {6, 3},
  };
  CHECK(reduce_group(heads, 1, 3, GroupReduce::Sum) == std::vector<float>{9, 9});
  CHECK(reduce_group(heads, 1, 3, GroupReduce::Mean) == std::vector<float>{3, 3});
  CHECK(reduce_group(heads, 1, 3, GroupReduce::Max) == std::vector<float>{6, 6});
  // MHA: group 1 is the head itself.
  CHECK(reduce_group(heads, 4, 1, GroupReduce::Mean) == std::vector<float>{2, 0});
  CHECK_THROWS_AS(reduce_group(heads, 2, 3, GroupReduce::Mean), Error);
}

TEST_CASE("parsers name the valid values", "[selection]") {
  CHECK(parse_pooling("avg") == Pooling::Avg);
  CHECK(parse_pooling("max") == Pooling::Max);
  CHECK(parse_pooling("none") == Pooling::None);
  CHECK_THROWS_WITH(parse_pooling("mean"), Catch::Contains("none|avg|max"));
  CHECK(parse_group_reduce("sum") == GroupReduce::Sum);
  CHECK_THROWS_WITH(parse_group_reduce("min"), Catch::Contains("mean|max|sum"));
}

TEST_CASE("keep_edit carries the kept indices and the scores", "[selection]") {
  const auto e = keep_edit(3, 1, {0, 2}, {0.5f, 0.1f, 0.7f});
  CHECK(e.layer == 3);
  CHECK(e.kv_head == 1);
  CHECK(e.keep == std::vector<int32_t>{0, 2});
  CHECK(e.scores == std::vector<float>{0.5f, 0.1f, 0.7f});
  CHECK(e.merges.empty());
}
