// The run pipeline's prefill reuse on the real model: a run that replays a captured prefill must be the
// run a fresh prefill gives (same tokens, log-probs, kept entries, budgets, recorded events and masks), and
// a capture must never serve a run whose upstream inputs differ (model file, prompt, chat template,
// recording options). The reference is always a fresh run::execute with no store.
#include <catch2/catch.hpp>

#include <filesystem>

#include "core/run/execute.h"
#include "core/trace/live_trace.h"
#include "tests/support/default_model.h"
#include "tests/support/temp_file.h"
#include "tests/support/trace_compare.h"

using namespace kvscope;

namespace {

const char* kPrompt =
    "The lighthouse keeper climbed the spiral stairs every evening at dusk. He trimmed the wick, polished the great "
    "lens and wrote the weather in his log: wind from the west, a long swell, three ships passing north. One night the "
    "lamp would not light. He searched the store room for oil and found only an old letter addressed to the keeper "
    "before him. It said that the key to the lamp room was hidden under the seventh step. Question: where was the key?";

run::RunSpec spec(const std::string& policy, const std::string& budget = "30%") {
  run::RunSpec s;
  s.policy = policy;
  s.budget = policy == "full" ? "" : budget;
  s.prompt = kPrompt;
  s.generation.max_new_tokens = 6;
  s.generation.stop_at_end_of_generation = false;
  s.record = "decode=off";
  return s;
}

run::RunSinks stored(run::PrefillStore& store) {
  run::RunSinks sinks;
  sinks.prefills = &store;
  return sinks;
}

struct Recorded {
  run::RunOutcome outcome;
  std::shared_ptr<const trace::RunTrace> trace;
};

Recorded recorded(const run::RunSpec& s, const model::Model& model, run::PrefillStore* store) {
  trace::LiveTrace live(std::chrono::milliseconds(0));
  run::RunSinks sinks;
  sinks.traces.push_back(&live);
  sinks.prefills = store;
  Recorded r;
  r.outcome = run::execute(s, model, sinks);
  r.trace = live.snapshot();
  return r;
}

void check_same_run(const engine::RunResult& got, const engine::RunResult& want) {
  CHECK(got.generated_tokens == want.generated_tokens);
  CHECK(got.logprobs == want.logprobs);
  CHECK(got.kept == want.kept);
  CHECK(got.layer_budgets == want.layer_budgets);
  CHECK(got.cache_bytes == want.cache_bytes);
}

void check_same_trace(const trace::RunTrace& got, const trace::RunTrace& want) {
  test::check_same_events_and_masks(got, want);
  test::check_same_qk(got, want);
  REQUIRE(got.attention.size() == want.attention.size());
  for (const auto& [key, map] : want.attention) CHECK(got.attention.at(key)->values == map->values);
  REQUIRE(got.key_similarity.size() == want.key_similarity.size());
  for (const auto& [key, map] : want.key_similarity) CHECK(got.key_similarity.at(key)->values == map->values);
  REQUIRE(got.stats.size() == want.stats.size());
  for (const auto& [name, stat] : want.stats) CHECK(got.stats.at(name).values == stat.values);
  CHECK(got.layer_budgets == want.layer_budgets);
}

}  // namespace

TEST_CASE("a replayed prefill gives the run a fresh prefill gives, for every one-pass policy", "[run][model]") {
  const model::Model& model = *test::default_model();
  run::PrefillStore store(2);
  const auto capture = run::execute(spec("full"), model, stored(store));
  CHECK_FALSE(capture.prefill_reused);
  for (const char* policy :
       {"snapkv", "pyramidkv", "tova", "h2o", "streaming_llm", "cake", "cake:mode=oneshot", "dynamickv", "kvmerger",
        "d2o", "snapkv:allocation=cake", "full", "cam", "dynamickv:decode_evict=true", "kvmerger:decode_evict=true",
        "d2o:allocation_level=head"}) {
    INFO("policy " << policy);
    const run::RunOutcome fresh = run::execute(spec(policy), model, {});
    const run::RunOutcome replayed = run::execute(spec(policy), model, stored(store));
    CHECK(replayed.prefill_reused);
    check_same_run(replayed.result, fresh.result);
  }
  // A block-wise policy evicts between blocks: it never takes a one-pass capture, and still runs right.
  for (const char* policy : {"h2o:block=32", "caote:block=32"}) {
    INFO("policy " << policy);
    const run::RunOutcome fresh = run::execute(spec(policy), model, {});
    const run::RunOutcome with_store = run::execute(spec(policy), model, stored(store));
    CHECK_FALSE(with_store.prefill_reused);
    check_same_run(with_store.result, fresh.result);
  }
}

TEST_CASE("a replayed prefill records the trace a fresh prefill records", "[run][model]") {
  const model::Model& model = *test::default_model();
  run::PrefillStore store(2);
  // With q/k, as the window records: the replayed run takes the prompt's q/k from the captured run.
  auto with_qk = [](run::RunSpec s) {
    s.record += ";qk=on";
    return s;
  };
  const Recorded first = recorded(with_qk(spec("snapkv", "40%")), model, &store);  // captures
  CHECK_FALSE(first.outcome.prefill_reused);
  REQUIRE_FALSE(first.trace->qk.empty());
  for (const char* policy : {"snapkv", "h2o", "kvmerger", "cake"}) {
    INFO("policy " << policy);
    const Recorded fresh = recorded(with_qk(spec(policy, "20%")), model, nullptr);
    const Recorded replayed = recorded(with_qk(spec(policy, "20%")), model, &store);
    CHECK(replayed.outcome.prefill_reused);
    check_same_run(replayed.outcome.result, fresh.outcome.result);
    check_same_trace(*replayed.trace, *fresh.trace);
    CHECK(replayed.trace->meta("prefill").find("replayed") == 0);
  }
}

TEST_CASE("a captured prefill never serves a run whose upstream inputs differ", "[run][model]") {
  const model::Model& model = *test::default_model();
  run::PrefillStore store(4);
  CHECK_FALSE(recorded(spec("snapkv"), model, &store).outcome.prefill_reused);

  // Downstream of the prefill: budget, policy, sampling and length may all change.
  run::RunSpec downstream = spec("tova", "10%");
  downstream.generation.max_new_tokens = 3;
  downstream.generation.sampling.temperature = 0.7f;
  downstream.generation.sampling.seed = 5;
  CHECK(recorded(downstream, model, &store).outcome.prefill_reused);

  auto check_fresh = [&](const run::RunSpec& changed, const model::Model& m, const char* what) {
    INFO("changed: " << what);
    const Recorded got = recorded(changed, m, &store);
    CHECK_FALSE(got.outcome.prefill_reused);
    check_same_run(got.outcome.result, run::execute(changed, m, {}).result);
  };
  run::RunSpec other_prompt = spec("snapkv");
  other_prompt.prompt += " Answer:";
  check_fresh(other_prompt, model, "prompt text");
  run::RunSpec chat = spec("snapkv");
  chat.chat.enabled = true;
  check_fresh(chat, model, "chat template");
  run::RunSpec record = spec("snapkv");
  record.record = "decode=off;pooling=mean";
  check_fresh(record, model, "recording options");
  run::RunSpec ids = spec("snapkv");
  ids.prompt_ids = run::encode_prompt(model, kPrompt, {});
  ids.prompt_ids.pop_back();
  check_fresh(ids, model, "prompt tokens");

  // Another model file: a link to the same weights under another name still counts as another model.
  const auto link = test::temp_file("prefill_model_link", ".gguf");
  std::filesystem::create_symlink(model.path(), link);
  const model::Model other = model::load_model(link);
  check_fresh(spec("snapkv"), other, "model file");
  std::filesystem::remove(link);
}

TEST_CASE("a block-wise run that takes unedited blocks from a capture is the run a fresh prefill gives", "[run][model]") {
  const model::Model& model = *test::default_model();
  const int prompt_length = static_cast<int>(run::encode_prompt(model, kPrompt, {}).size());
  run::PrefillStore store(2);
  // Captures the blocks of 16 rows computed before caote's first edit: 80 % of the prompt fits four of them.
  const Recorded first = recorded(spec("caote:block=16", "80%"), model, &store);
  CHECK(first.outcome.result.prefill_share_from_blocks == 0.0);
  const std::string model_key = run::prefill_key(model, first.outcome.prompt_tokens, spec("full"), false).model;
  const int captured = store.block_prefix(model_key, first.outcome.prompt_tokens, 16).blocks();
  CHECK(captured == static_cast<int>(0.8 * prompt_length) / 16);

  struct Case {
    const char* policy;
    const char* budget;
    bool reuses;
  };
  // Another budget, another block-wise policy with the same block size, trimming before or after a layer's
  // output; a budget below one block edits in the first block and takes nothing.
  for (const Case& c : {Case{"caote:block=16", "40%", true}, Case{"caote:block=16", "80%", true},
                        Case{"h2o:block=16", "50%", true}, Case{"caote:block=16,trim=after_output", "30%", true},
                        Case{"caote:block=16", "10%", false}, Case{"h2o:block=32", "50%", false}}) {
    INFO("policy " << c.policy << " at " << c.budget);
    const Recorded fresh = recorded(spec(c.policy, c.budget), model, nullptr);
    const Recorded reused = recorded(spec(c.policy, c.budget), model, &store);
    CHECK((reused.outcome.result.prefill_share_from_blocks > 0.0) == c.reuses);
    CHECK_FALSE(reused.outcome.prefill_reused);
    check_same_run(reused.outcome.result, fresh.outcome.result);
    check_same_trace(*reused.trace, *fresh.trace);
  }
  // A run that stays unedited longer than the capture extends it; the whole prompt fits in a full budget.
  const Recorded whole = recorded(spec("h2o:block=16", "100%"), model, &store);
  check_same_run(whole.outcome.result, recorded(spec("h2o:block=16", "100%"), model, nullptr).outcome.result);
  CHECK(store.block_prefix(model_key, first.outcome.prompt_tokens, 16).blocks() == (prompt_length + 15) / 16);
  const Recorded again = recorded(spec("h2o:block=16", "100%"), model, &store);
  CHECK(again.outcome.result.prefill_share_from_blocks == 1.0);
  CHECK(again.outcome.result.logprobs == whole.outcome.result.logprobs);
  CHECK(again.trace->meta("prefill").find("computed, 100 % of its layers") == 0);
  CHECK(whole.trace->meta("prefill").find("computed, ") == 0);  // it took the four captured blocks

  // Neither does a cache of another storage type (its rows round differently), nor another prompt.
  run::RunSpec half = spec("caote:block=16", "80%");
  half.generation.cache_type = kernels::CacheType::F16;
  const Recorded half_run = recorded(half, model, &store);
  CHECK(half_run.outcome.result.prefill_share_from_blocks == 0.0);
  check_same_run(half_run.outcome.result, run::execute(half, model, {}).result);
  run::RunSpec other = spec("caote:block=16", "80%");
  other.prompt = std::string("Notes: ") + kPrompt;
  const Recorded other_run = recorded(other, model, &store);
  CHECK(other_run.outcome.result.prefill_share_from_blocks == 0.0);
  check_same_run(other_run.outcome.result, run::execute(other, model, {}).result);
}
