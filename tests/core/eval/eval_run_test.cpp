// Teacher forcing and the evaluator on the default model. Forced log-probabilities are checked against an
// independent path: the engine's one-pass prefill of the prompt plus the forced prefix (prompt_logits).
#include <catch2/catch.hpp>

#include <cmath>

#include "core/common/error.h"
#include "core/eval/eval_run.h"
#include "core/run/run_spec.h"
#include "tests/support/default_model.h"

using namespace kvscope;

namespace {

std::vector<int> short_prompt(const eval::Evaluator& ev) {
  return ev.encode("The lighthouse keeper climbed the stairs every evening to light the lamp, and");
}

// log p(tokens[i]) after tokens[0..i) from a fresh one-pass prefill, for i in [from, size).
std::vector<double> prefill_logprobs(engine::Engine& engine, const std::vector<int>& tokens, std::size_t from) {
  std::vector<double> out;
  for (std::size_t i = from; i < tokens.size(); ++i) {
    const auto logits = engine.prompt_logits({tokens.begin(), tokens.begin() + i});
    out.push_back(eval::log_softmax(logits.data(), static_cast<int>(logits.size()))[tokens[i]]);
  }
  return out;
}

}  // namespace

TEST_CASE("teacher forcing feeds the given tokens and scores them like a prefill would", "[model]") {
  const auto* model = test::default_model();
  eval::Evaluator ev(*model);
  engine::Engine engine(*model);
  const auto prompt = short_prompt(ev);
  std::vector<int> forced;
  for (const char* word : {" the", " sea", " was", " calm"}) forced.push_back(model->tokenizer->encode(word, false)[0]);
  engine::GenerateOptions options;
  options.max_new_tokens = 4;
  options.forced_tokens = forced;
  options.stop_at_end_of_generation = false;
  const auto r = engine.generate(prompt, options);
  CHECK(r.generated_tokens == forced);
  std::vector<int> all = prompt;
  all.insert(all.end(), forced.begin(), forced.end());
  const auto expected = prefill_logprobs(engine, all, prompt.size());
  REQUIRE(r.logprobs.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(r.logprobs[i] == Approx(expected[i]).margin(2e-3));

  options.forced_tokens = {forced[0]};
  CHECK_THROWS_AS(engine.generate(prompt, options), UsageError);  // fewer forced tokens than new tokens
  options.forced_tokens = {-1, 0, 0, 0};
  CHECK_THROWS_AS(engine.generate(prompt, options), UsageError);
}

TEST_CASE("fidelity: the full cache agrees with itself; a small budget costs and saves", "[model]") {
  const auto* model = test::default_model();
  eval::Evaluator ev(*model);
  const auto ref = ev.fidelity_reference(short_prompt(ev), 6);
  REQUIRE(ref.continuation.size() == 6);
  REQUIRE(ref.logprobs.size() == 6);
  // The reference's greedy tokens are the argmax of its own distributions.
  for (std::size_t t = 0; t < 6; ++t)
    CHECK(eval::argmax(ref.logprobs[t].data(), static_cast<int>(ref.logprobs[t].size())) == ref.continuation[t]);

  const auto same = ev.fidelity(ref, {"full", ""});
  CHECK(same.score.top1_agreement == 1.0);
  CHECK(same.score.kl_mean < 1e-6);
  CHECK(std::abs(same.score.logprob_gap) < 1e-5);
  for (double v : same.layer_nmse) CHECK(v < 1e-10);

  const auto small = ev.fidelity(ref, {"streaming_llm", "6"});
  CHECK(small.score.kl_mean > 1e-3);
  CHECK(small.score.kl_max >= small.score.kl_mean);
  CHECK(small.memory.peak_bytes < small.memory.full_peak_bytes);
  CHECK(small.memory.saved() > 0.0);
  double nmse = 0.0;
  for (double v : small.layer_nmse) nmse += v;
  CHECK(nmse > 0.0);
  CHECK_THROWS_AS(ev.fidelity(ref, {"h2o", ""}), UsageError);  // a compressing policy needs a budget
}

TEST_CASE("perplexity under the full cache equals per-token prefill log-probabilities", "[model]") {
  const auto* model = test::default_model();
  eval::Evaluator ev(*model);
  engine::Engine engine(*model);
  auto tokens =
      ev.encode("Bread dough is flour and water with a little salt and a living organism: yeast. It eats sugars.");
  REQUIRE(tokens.size() >= 16);
  tokens.resize(16);
  const auto ref = ev.ppl_reference(tokens, 10);
  const auto expected = prefill_logprobs(engine, tokens, 10);
  double sum = 0.0;
  for (double lp : expected) sum += lp;
  const auto full = ev.ppl(ref, {"full", ""});
  CHECK(full.ppl_full == Approx(std::exp(-sum / expected.size())).epsilon(2e-3));
  CHECK(full.ppl == Approx(full.ppl_full).epsilon(1e-6));
  CHECK(full.scored_tokens == 6);
  CHECK_THROWS_AS(ev.ppl_reference(tokens, 16), UsageError);
}

TEST_CASE("cells replay the reference's prefill and score exactly as with a prefill of their own", "[model]") {
  const auto* model = test::default_model();
  eval::Evaluator ev(*model);
  const auto ref = ev.fidelity_reference(short_prompt(ev), 4);
  CHECK(ev.prefills_reused() == 0);
  for (const eval::CellPolicy& cell : {eval::CellPolicy{"snapkv", "6"}, eval::CellPolicy{"h2o", "50%"}}) {
    const auto reused = ev.fidelity(ref, cell);
    eval::Evaluator fresh(*model);  // an empty prefill store: this cell runs the prompt itself
    const auto own = fresh.fidelity(ref, cell);
    CHECK(fresh.prefills_reused() == 0);
    CHECK(reused.score.top1_agreement == own.score.top1_agreement);
    CHECK(reused.score.kl_mean == own.score.kl_mean);
    CHECK(reused.score.logprob_gap == own.score.logprob_gap);
    CHECK(reused.layer_nmse == own.layer_nmse);
    CHECK(reused.memory.peak_bytes == own.memory.peak_bytes);
  }
  CHECK(ev.prefills_reused() == 2);
  // CAOTE trims each layer before its output, so its prefill depends on the budget and runs again.
  ev.fidelity(ref, {"caote", "6"});
  CHECK(ev.prefills_reused() == 2);
}

TEST_CASE("a reference that stops at the end of generation is the full cache's own greedy run", "[model]") {
  const auto* model = test::default_model();
  eval::Evaluator ev(*model);
  engine::Engine engine(*model);
  // A chat question the model answers in a few tokens, then ends.
  run::ChatSpec chat;
  chat.enabled = true;
  const auto prompt = run::encode_prompt(*model, "Answer with one word. What colour is the sky on a clear day?", chat);
  engine::GenerateOptions options;  // greedy, stops at the end of generation: what a window run does
  options.max_new_tokens = 32;
  const auto greedy = engine.generate(prompt, options);
  REQUIRE(greedy.stop_reason == "end_of_generation");
  REQUIRE(greedy.generated_tokens.size() < 32);

  const auto ref = ev.fidelity_reference(prompt, 32, eval::ReferenceEnd::AtEndOfGeneration);
  CHECK(ref.continuation == greedy.generated_tokens);
  CHECK(ref.stop_reason == "end_of_generation");
  CHECK(ref.logprobs.size() == greedy.generated_tokens.size());
  const auto scored = ev.fidelity(ref, {"h2o", "50%"});
  CHECK(scored.score.steps == static_cast<int>(greedy.generated_tokens.size()));
  CHECK(scored.reference_stop_reason == "end_of_generation");

  // Sweeps keep scoring every new token: past the end token, as before.
  const auto all = ev.fidelity_reference(prompt, 32);
  CHECK(all.continuation.size() == 32);
  CHECK(all.stop_reason == "max_new_tokens");
}
