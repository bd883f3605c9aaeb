// The evaluation's evidence observer: on hand-made caches and edits (the steps and layers where each evidence
// token left, the retention at the first answer token's step), and on the default model, where a full cache
// keeps everything and StreamingLLM with a window shorter than the distance to a mid-prompt span keeps nothing.
#include <catch2/catch.hpp>

#include <numeric>

#include "core/cache/kv_cache.h"
#include "core/eval/eval_run.h"
#include "core/eval/evidence_observer.h"
#include "tests/support/default_model.h"

using namespace kvscope;

namespace {

// A cache of `layers` x `kv_heads` holding positions 0..n-1 everywhere (the rows' values do not matter here).
cache::KVCache filled_cache(int layers, int kv_heads, int n) {
  cache::KVCache c(layers, kv_heads, 2);
  std::vector<float> rows(static_cast<std::size_t>(n) * kv_heads * 2, 0.5f);
  std::vector<int32_t> positions(static_cast<std::size_t>(n));
  std::iota(positions.begin(), positions.end(), 0);
  for (int l = 0; l < layers; ++l) c.append(l, rows.data(), rows.data(), n, positions.data());
  return c;
}

cache::HeadEdit keep_all_but(int layer, int kv_head, int n, const std::vector<int>& dropped) {
  cache::HeadEdit e;
  e.layer = layer, e.kv_head = kv_head;
  for (int i = 0; i < n; ++i)
    if (std::find(dropped.begin(), dropped.end(), i) == dropped.end()) e.keep.push_back(i);
  return e;
}

// Delivers an edit as the engine does: observers first, with the cache as the edit found it.
void apply(eval::EvidenceObserver& o, cache::KVCache& c, cache::CacheEdit edit, observation::StepInfo step) {
  o.on_edit(edit, c, step);
  c.apply(edit);
}

}  // namespace

TEST_CASE("the evidence observer records where each evidence token first left and reads the answer step's cache") {
  // Evidence at positions 3..5; two layers, one KV head; the question (2 tokens) is appended after the prompt.
  cache::KVCache c = filled_cache(2, 1, 8);
  eval::EvidenceObserver o({{3, 5, "needle value"}}, /*appended_tokens=*/2, 2, 1);
  observation::StepInfo prefill{observation::Phase::Prefill, 0, 8, true};
  // Step row 0 (the prefill): layer 1 evicts position 4.
  apply(o, c, {{keep_all_but(1, 0, 8, {4})}}, prefill);
  o.on_step_end(prefill, c, 17, 0.0f);  // samples the first appended token's successor: not the answer yet
  CHECK(o.first_answer_step() == -1);
  // Row 1 (decode step 0): layer 0 merges position 3 (entry 3) into entry 2; layer 1 evicts 4 again? It is gone;
  // it evicts position 5 (entry 4 now, since 4 left).
  cache::HeadEdit merge = keep_all_but(0, 0, 8, {3});
  merge.merges.push_back({2, {3}, {0.5f, 0.5f}});
  observation::StepInfo decode0{observation::Phase::Decode, 0, 9, true};
  apply(o, c, {{merge, keep_all_but(1, 0, 7, {4})}}, decode0);
  o.on_step_end(decode0, c, 18, 0.0f);
  CHECK(o.first_answer_step() == -1);
  // Row 2 (decode step 1) samples the first answer token: the retention is read here.
  observation::StepInfo decode1{observation::Phase::Decode, 1, 10, true};
  o.on_step_end(decode1, c, 19, 0.0f);
  CHECK(o.first_answer_step() == 2);
  // Row 3: layer 0 evicts position 5 after the answer started: a departure, not in the retention.
  observation::StepInfo decode2{observation::Phase::Decode, 2, 11, true};
  apply(o, c, {{keep_all_but(0, 0, 7, {3})}}, decode2);  // layer 0 holds 0,1,2,4,5,6,7: entry 4 is position 5
  o.on_step_end(decode2, c, 20, 0.0f);

  const auto report = o.report();
  REQUIRE(report);
  CHECK(report->first_answer_step == 2);
  // Layer 0 held 4 and 5 of {3, 4, 5} at row 2; layer 1 held 3 only.
  CHECK(report->retention.kept[0][0] == Approx(2.0 / 3));
  CHECK(report->retention.kept[1][0] == Approx(1.0 / 3));
  CHECK(report->retention.min_layer == 1);
  REQUIRE(report->departures.size() == 3);
  const auto& d3 = report->departures[0];
  CHECK((d3.position == 3 && d3.left && d3.step == 1 && d3.layer == 0 && d3.kv_head == 0 && d3.merged));
  const auto& d4 = report->departures[1];
  CHECK((d4.position == 4 && d4.left && d4.step == 0 && d4.layer == 1 && !d4.merged));
  const auto& d5 = report->departures[2];  // layer 1 at row 1 comes before layer 0 at row 3
  CHECK((d5.position == 5 && d5.left && d5.step == 1 && d5.layer == 1 && !d5.merged));
}

TEST_CASE("the evidence observer reports nothing without evidence, and the first answer step all the same") {
  cache::KVCache c = filled_cache(1, 1, 4);
  eval::EvidenceObserver o({}, 0, 1, 1);
  o.on_step_end({observation::Phase::Prefill, 0, 4, true}, c, 5, 0.0f);
  CHECK(o.first_answer_step() == 0);
  CHECK_FALSE(o.report());
}

TEST_CASE("a full cache keeps its evidence and StreamingLLM loses a span beyond its window", "[model]") {
  const auto* model = test::default_model();
  eval::Evaluator ev(*model);
  std::string text;
  for (int i = 0; i < 12; ++i) text += "The river ran past the old mill and the children watched the boats go by. ";
  eval::AnswerRequest request;
  request.prompt = ev.encode(text + "What did the children watch?");
  const int n = static_cast<int>(request.prompt.size());
  REQUIRE(n > 120);
  request.max_new_tokens = 4;
  // A span in the middle: farther from the end than StreamingLLM's window (budget 32 - 4 sinks).
  request.evidence = {{n / 2 - 5, n / 2 + 5, "test"}};

  const auto full = ev.answer(request, {"full", ""});
  REQUIRE(full.retention);
  CHECK(full.first_answer_step == 0);
  CHECK(full.retention->retention.mean == 1.0);
  for (const auto& layer : full.retention->retention.kept)
    for (double k : layer) CHECK(k == 1.0);
  for (const auto& d : full.retention->departures) CHECK_FALSE(d.left);

  const auto streaming = ev.answer(request, {"streaming_llm", "32"});
  REQUIRE(streaming.retention);
  CHECK(streaming.retention->retention.mean == 0.0);
  CHECK(streaming.retention->retention.mostly_lost());
  for (const auto& d : streaming.retention->departures) {
    CHECK(d.left);
    CHECK(d.step == 0);  // evicted once, after the one-pass prefill
  }

  // Query-agnostic: the question appended after the compression; the answer's step follows it.
  eval::AnswerRequest agnostic = request;
  agnostic.prompt = ev.encode(text);
  agnostic.appended = model->tokenizer->encode(" What did the children watch?", false);
  const auto a = ev.answer(agnostic, {"full", ""});
  CHECK(a.first_answer_step == static_cast<int>(agnostic.appended.size()));
  CHECK(a.retention->retention.mean == 1.0);
}
