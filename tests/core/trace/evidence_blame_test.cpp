// Blame, evidence fate and evidence retention (core/trace/evidence_blame.h, evidence_fate.h, evidence_in_cache.h)
// on a hand-made trace: one layer, two query heads sharing one KV head, a 4-token prompt and 3 generated tokens,
// with queries and keys that float16 holds exactly, so every attention value is computed here in double from the
// definition p(i, j) = exp(scale * q_i . k_j - lse_i) and compared with what the core returns.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>

#include "core/common/error.h"
#include "core/trace/eval_run_info.h"
#include "core/trace/evidence_blame.h"
#include "core/trace/evidence_fate.h"
#include "core/trace/evidence_in_cache.h"
#include "core/trace/float16.h"

using namespace kvscope;
using namespace kvscope::trace;

namespace {

constexpr int kPrompt = 4, kGenerated = 3, kPositions = kPrompt + kGenerated, kHeads = 2, kDim = 2;
constexpr double kScale = 0.5;
// [position][head][dim] queries and [position][dim] keys of the single KV head: multiples of 1/4, exact in float16.
const double kQueries[kPositions][kHeads][kDim] = {{{1, 0}, {0, 1}},    {{0.5, 1}, {1, -1}},   {{2, 0.25}, {-1, 1}},
                                                   {{1, 1}, {0.25, 2}}, {{1.5, -0.5}, {2, 1}}, {{0, 2}, {1, 0.5}},
                                                   {{1, 1}, {1, 1}}};
const double kKeys[kPositions][kDim] = {{1, 0.5}, {2, -1}, {0.25, 1.5}, {-1, 1}, {0.5, 0.5}, {1, 2}, {0, 1}};

double score(int i, int h, int j) {
  return kScale * (kQueries[i][h][0] * kKeys[j][0] + kQueries[i][h][1] * kKeys[j][1]);
}

// The full cache's row i over keys 0..i.
double full_p(int i, int h, int j) {
  double z = 0;
  for (int k = 0; k <= i; ++k) z += std::exp(score(i, h, k));
  return std::exp(score(i, h, j)) / z;
}

// steps: the prefill (seq_len 4), then decode steps 0 and 1. kept[pos][step] for the single KV head.
std::shared_ptr<RunTrace> make_run(const std::string& name, const std::vector<int>& generated,
                                   const std::vector<std::vector<uint8_t>>& kept, bool with_qk) {
  auto r = std::make_shared<RunTrace>();
  r->name = name;
  r->metadata["policy"] = name;
  r->n_layers = 1, r->n_heads = kHeads, r->n_kv_heads = 1, r->head_dim = kDim, r->prompt_length = kPrompt;
  r->prompt_ids = {1, 2, 3, 4};
  r->prompt_strings = {"a", "b", "c", "d"};
  r->generated_ids = generated;
  r->generated_strings = std::vector<std::string>(generated.size(), "x");
  r->complete = true;
  const int seq[] = {4, 5, 6};
  for (int s = 0; s < 3; ++s) {
    StepStats st;
    st.phase = s == 0 ? 0 : 1;
    st.step = s == 0 ? 0 : s - 1;
    st.seq_len = seq[s];
    r->steps.push_back(st);
  }
  std::vector<uint8_t> values;  // [kv][position][step]
  for (int p = 0; p < kPositions; ++p)
    for (int s = 0; s < 3; ++s) values.push_back(kept[static_cast<std::size_t>(p)][static_cast<std::size_t>(s)]);
  r->kept_mask.push_back(KeptMask::from_head_position_step(1, kPositions, 3, values));
  if (with_qk) {
    auto span = std::make_shared<QKSpan>();
    span->n_positions = kPositions - 1;  // the last generated token is never fed back
    QKSpan::Layer layer;
    for (int i = 0; i < span->n_positions; ++i) {
      for (int h = 0; h < kHeads; ++h) {
        for (int d = 0; d < kDim; ++d) layer.queries.push_back(float_to_half(static_cast<float>(kQueries[i][h][d])));
        double z = 0;
        for (int k = 0; k <= i; ++k) z += std::exp(score(i, h, k));
        layer.lse.push_back(static_cast<float>(std::log(z)));
      }
      for (int d = 0; d < kDim; ++d) layer.keys.push_back(float_to_half(static_cast<float>(kKeys[i][d])));
    }
    span->layers.push_back(std::move(layer));
    r->qk.push_back(span);
    r->qk_scale = kScale;
  }
  return r;
}

// Processed positions held at the end of each of the three steps (4, 5, 6 processed).
std::vector<std::vector<uint8_t>> all_kept() {
  std::vector<std::vector<uint8_t>> k(kPositions, std::vector<uint8_t>(3, 0));
  for (int p = 0; p < kPositions; ++p)
    for (int s = 0; s < 3; ++s) k[p][s] = p < 4 + s ? 1 : 0;
  return k;
}

// The policy evicts position 1 at the end of the prefill and merges position 2 into 3 in decode step 0.
std::shared_ptr<RunTrace> make_policy(const std::vector<int>& generated) {
  auto kept = all_kept();
  kept[1] = {0, 0, 0};
  kept[2] = {1, 2, 2};
  auto r = make_run("policy", generated, kept, false);
  Event evicted;
  evicted.position = 1;
  r->events.push_back(evicted);
  Event merged;
  merged.phase = 1, merged.step = 0, merged.position = 2, merged.action = EventAction::Merged, merged.merge_target = 3,
  merged.merge_weight = 0.5f;
  r->events.push_back(merged);
  return r;
}

}  // namespace

TEST_CASE("blame at the first divergent answer token is the full cache's attention on what the policy evicted",
          "[evidence]") {
  const auto full = make_run("full", {10, 11, 12}, all_kept(), true);
  const auto policy = make_policy({10, 13, 14});
  const std::vector<int> evidence = {1, 2};
  const EvidenceBlame b = evidence_blame(*policy, eval_run_info(*policy), *full, eval_run_info(*full), evidence);
  // Answer token 1 differs; it was produced by the query at position 4 (token 0's), which attended to the cache
  // at the end of the prefill (step row 0), where the policy no longer held position 1.
  CHECK(b.diverged);
  CHECK(b.divergence == 1);
  CHECK(b.query == 4);
  CHECK(b.mask_step == 0);
  REQUIRE(b.heads.size() == 2);
  CHECK(b.n_lost[0][0] == 1);
  for (int h = 0; h < kHeads; ++h) {
    CHECK(b.heads[h].lost_mass == Approx(full_p(4, h, 1)).margin(1e-6));
    CHECK(b.heads[h].evidence_mass == Approx(full_p(4, h, 1) + full_p(4, h, 2)).margin(1e-6));
    CHECK(b.heads[h].evidence_lost_mass == Approx(full_p(4, h, 1)).margin(1e-6));
  }
  const auto top = b.largest(1);
  REQUIRE(top.size() == 1);
  CHECK(top[0].lost_mass == Approx(std::max(full_p(4, 0, 1), full_p(4, 1, 1))).margin(1e-6));
}

TEST_CASE("blame of a later divergence reads the kept mask of the step that sampled the token before", "[evidence]") {
  const auto full = make_run("full", {10, 11, 12}, all_kept(), true);
  const auto policy = make_policy({10, 11, 15});
  const EvidenceBlame b = evidence_blame(*policy, eval_run_info(*policy), *full, eval_run_info(*full), {2});
  // Token 2 was produced by position 5's query, in decode step 1 (row 2), over the cache at the end of row 1,
  // where positions 1 (evicted) and 2 (merged away) are gone; position 5 itself is the query's own token.
  CHECK(b.divergence == 2);
  CHECK(b.query == 5);
  CHECK(b.mask_step == 1);
  CHECK(b.n_lost[0][0] == 2);
  for (int h = 0; h < kHeads; ++h) {
    CHECK(b.heads[h].lost_mass == Approx(full_p(5, h, 1) + full_p(5, h, 2)).margin(1e-6));
    CHECK(b.heads[h].evidence_mass == Approx(full_p(5, h, 2)).margin(1e-6));
  }
}

TEST_CASE(
    "blame when the answers agree is taken at the first answer token; the full cache against itself loses nothing",
    "[evidence]") {
  const auto full = make_run("full", {10, 11, 12}, all_kept(), true);
  const auto policy = make_policy({10, 11, 12});
  const EvidenceBlame b = evidence_blame(*policy, eval_run_info(*policy), *full, eval_run_info(*full), {});
  CHECK_FALSE(b.diverged);
  CHECK(b.divergence == 0);
  CHECK(b.query == 3);
  CHECK(b.mask_step == 0);
  for (int h = 0; h < kHeads; ++h) CHECK(b.heads[h].lost_mass == Approx(full_p(3, h, 1)).margin(1e-6));

  const EvidenceBlame self = evidence_blame(*full, eval_run_info(*full), *full, eval_run_info(*full), {1, 2});
  for (const HeadBlame& h : self.heads) CHECK(h.lost_mass == 0.0);
  CHECK(self.max_lost_mass == 0.0);
}

TEST_CASE("blame is refused without the full run's q/k and for runs of different prompts", "[evidence]") {
  const auto no_qk = make_run("full", {10, 11, 12}, all_kept(), false);
  const auto policy = make_policy({10, 13, 14});
  CHECK_THROWS_WITH(evidence_blame(*policy, eval_run_info(*policy), *no_qk, eval_run_info(*no_qk), {}),
                    Catch::Contains("holds no queries and keys"));
  auto other = make_run("full", {10, 11, 12}, all_kept(), true);
  std::const_pointer_cast<RunTrace>(other)->prompt_ids = {1, 2, 3, 5};
  CHECK_THROWS_WITH(evidence_blame(*policy, eval_run_info(*policy), *other, eval_run_info(*other), {}),
                    Catch::Contains("different prompts"));
}

TEST_CASE("evidence retention and fate read the policy's kept masks and events", "[evidence]") {
  const auto policy = make_policy({10, 13, 14});
  const std::vector<eval::EvidenceSpan> spans = {{1, 2, "needle value"}, {0, 0, "needle key"}};
  const std::vector<int> positions = {0, 1, 2};
  CHECK(evidence_in_cache(*policy, positions, 0).mean == Approx(2.0 / 3.0));
  CHECK(evidence_in_cache(*policy, positions, 1).mean == Approx(1.0 / 3.0));
  const auto by_step = evidence_kept_by_step(*policy, positions);
  REQUIRE(by_step.size() == 3);
  CHECK(by_step[2][0] == Approx(1.0 / 3.0));

  const auto fate = evidence_fate(*policy, spans, 1);
  REQUIRE(fate.size() == 3);
  CHECK(fate[0].position == 0);
  CHECK(fate[0].kind == "needle key");
  CHECK(fate[0].kept == 1);
  CHECK(fate[0].departures.empty());
  CHECK(fate[1].kind == "needle value");
  CHECK(fate[1].kept == 0);
  REQUIRE(fate[1].departures.size() == 1);
  CHECK(fate[1].departures[0].action == EventAction::Evicted);
  CHECK(fate[1].departures[0].step == 0);
  REQUIRE(fate[2].departures.size() == 1);
  CHECK(fate[2].departures[0].action == EventAction::Merged);
  CHECK(fate[2].departures[0].merge_target == 3);
  CHECK(fate[2].departures[0].step == 1);
  // Up to the prefill only, the merge has not happened yet.
  CHECK(evidence_fate(*policy, spans, 0)[2].departures.empty());
}

TEST_CASE("eval_run_info reads an evaluation's attributes and refuses malformed ones", "[evidence]") {
  auto run = make_policy({10, 13, 14});
  auto& r = *std::const_pointer_cast<RunTrace>(run);
  EvalRunInfo plain = eval_run_info(r);
  CHECK_FALSE(plain.from_evaluation);
  CHECK(plain.first_answer_step == 0);
  r.metadata["eval_first_answer_step"] = "1";
  r.metadata["eval_appended_tokens"] = "1";
  r.metadata["eval_references"] = "[\"7421\", \"seven\"]";
  r.metadata["eval_score"] = "0.5";
  const EvalRunInfo info = eval_run_info(r);
  CHECK(info.from_evaluation);
  CHECK(info.appended_tokens == 1);
  CHECK(info.references == std::vector<std::string>{"7421", "seven"});
  CHECK(*info.score == 0.5);
  CHECK(answer_ids(r, info) == std::vector<int>{13, 14});
  r.metadata["eval_first_answer_step"] = "9";
  CHECK_THROWS_WITH(eval_run_info(r), Catch::Contains("eval_first_answer_step") && Catch::Contains("outside"));
  r.metadata["eval_first_answer_step"] = "one";
  CHECK_THROWS_WITH(eval_run_info(r), Catch::Contains("expected an integer"));
}
