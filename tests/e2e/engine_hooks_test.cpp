// Engine hooks on the default model: block-wise prefill is exact, the length check catches a policy that
// stops compressing, observers see every layer, and cancellation stops a run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <string>

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/policy/policy.h"
#include "core/policy/registry.h"
#include "tests/support/default_model.h"

using namespace kvscope;

namespace {

// Keeps everything but runs the prompt in blocks; claims a length that it may or may not honour.
class BlockPolicy final : public policy::Policy {
 public:
  BlockPolicy(int block, int claimed_extra) : block_(block), claimed_extra_(claimed_extra) {}
  std::string name() const override { return "test_block"; }
  policy::ObservationRequest request(int, policy::Phase) const override {
    policy::ObservationRequest r;
    r.column_sums = true;
    return r;
  }
  int prefill_block_size() const override { return block_; }
  void begin(const policy::RunInfo& info) override { layers_ = info.config.n_layers; }
  cache::CacheEdit after_layer(const policy::AttentionObservation& obs, cache::KVCache&) override {
    ++observations_;
    // Every query's probabilities sum to 1, so the column sums add up to the number of queries.
    double total = 0;
    for (float v : obs.column_sums[0]) total += v;
    max_mass_error_ = std::max(max_mass_error_, std::abs(total - obs.n_queries()));
    return {};
  }
  cache::CacheEdit after_step(const policy::StepInfo&, cache::KVCache&) override { return {}; }
  int expected_length(int, int, const policy::StepInfo& step) const override { return step.seq_len + claimed_extra_; }
  std::vector<int> layer_budgets() const override { return std::vector<int>(layers_, 0); }
  int observations_ = 0;
  double max_mass_error_ = 0;

 private:
  int block_, claimed_extra_, layers_ = 0;
};

std::vector<int> prompt(const model::Model& m) {
  return m.tokenizer->encode("The old lighthouse keeper climbed the stairs every evening to light the lamp, and the ships "
                             "that passed in the night trusted the light more than their maps.");
}

}  // namespace

TEST_CASE("block-wise prefill gives the same tokens as one pass; observers see every layer") {
  const model::Model* m = test::default_model();
  engine::Engine engine(*m);
  engine::GenerateOptions options;
  options.max_new_tokens = 12;
  options.stop_at_end_of_generation = false;
  const auto ids = prompt(*m);
  const auto reference = engine.generate(ids, options);
  BlockPolicy blocks(7, 0);
  engine::RunHooks hooks;
  hooks.policy = &blocks;
  const auto blocked = engine.generate(ids, options, hooks);
  REQUIRE(blocked.generated_tokens == reference.generated_tokens);
  const int prefill_blocks = (static_cast<int>(ids.size()) + 6) / 7;
  REQUIRE(blocks.observations_ == m->config.n_layers * (prefill_blocks + options.max_new_tokens - 1));
  REQUIRE(blocks.max_mass_error_ < 1e-3);
}

TEST_CASE("the engine stops a policy whose cache length disagrees with its budget") {
  const model::Model* m = test::default_model();
  engine::Engine engine(*m);
  BlockPolicy liar(0, -1);  // claims to keep one token fewer than it does
  engine::RunHooks hooks;
  hooks.policy = &liar;
  engine::GenerateOptions options;
  options.max_new_tokens = 2;
  try {
    engine.generate(prompt(*m), options, hooks);
    FAIL("no error");
  } catch (const Error& e) {
    REQUIRE_THAT(e.what(), Catch::Contains("policy 'test_block' left layer 0 kv head 0") && Catch::Contains("budget says"));
  }
}

TEST_CASE("a cancelled run returns early and says so") {
  const model::Model* m = test::default_model();
  engine::Engine engine(*m);
  std::atomic<bool> cancel{false};
  engine::RunHooks hooks;
  hooks.cancel = &cancel;
  hooks.progress = [&](const engine::Progress& p) {
    if (p.phase == observation::Phase::Decode && p.done == 3) cancel = true;
  };
  engine::GenerateOptions options;
  options.max_new_tokens = 50;
  options.stop_at_end_of_generation = false;
  const auto r = engine.generate(prompt(*m), options, hooks);
  REQUIRE(r.cancelled);
  REQUIRE(r.stop_reason == "cancelled");
  REQUIRE(r.generated_tokens.size() <= 4);
}

namespace {

// The most entries any KV head's attention covered, per phase, as observers see it (the attention that
// produced the layer's output).
class KeyCounter final : public engine::RunObserver {
 public:
  policy::ObservationRequest request(int, policy::Phase) const override {
    policy::ObservationRequest r;
    r.column_sums = true;
    return r;
  }
  void on_observation(const policy::AttentionObservation& obs) override {
    int& most = obs.phase == policy::Phase::Prefill ? most_prefill : most_decode;
    for (int n : obs.n_keys) most = std::max(most, n);
  }
  int most_prefill = 0, most_decode = 0;
};

}  // namespace

TEST_CASE("with the pre-output trim a step's attention never sees more than the budget") {
  const model::Model* m = test::default_model();
  engine::Engine engine(*m);
  engine::GenerateOptions options;
  options.max_new_tokens = 4;
  options.stop_at_end_of_generation = false;
  options.budget = policy::BudgetSpec::parse("12");
  const auto ids = prompt(*m);
  REQUIRE(ids.size() > 24u);
  const int budget = 12, block = 8;
  for (const std::string spec : {"caote:block=8", "h2o:block=8,trim=before_output", "tova:block=8,trim=before_output",
                                 "snapkv:block=8,decode_evict=true,trim=before_output,window=4"}) {
    INFO(spec);
    auto before = policy::make_policy(spec);
    KeyCounter seen;
    engine::RunHooks hooks;
    hooks.policy = before.policy.get();
    hooks.observers.push_back(&seen);
    engine.generate(ids, options, hooks);
    CHECK(seen.most_prefill == budget);
    CHECK(seen.most_decode == budget);

    // The older order: each block's queries see the budget plus the block, each decode step one more.
    const std::string after_spec = spec.find("trim=") == std::string::npos
                                       ? spec + ",trim=after_output"
                                       : spec.substr(0, spec.find("trim=")) + "trim=after_output" +
                                             spec.substr(spec.find("trim=") + std::string("trim=before_output").size());
    auto after = policy::make_policy(after_spec);
    KeyCounter seen_after;
    hooks.policy = after.policy.get();
    hooks.observers = {&seen_after};
    engine.generate(ids, options, hooks);
    CHECK(seen_after.most_prefill == budget + block);
    CHECK(seen_after.most_decode == budget + 1);
  }
}

TEST_CASE("a prefill reports each layer before it runs, one-pass and block-wise") {
  const model::Model* m = test::default_model();
  engine::Engine engine(*m);
  const std::vector<int> ids = prompt(*m);
  const int n_layers = m->config.n_layers, n = static_cast<int>(ids.size());
  for (const int block : {0, 8}) {
    INFO("block " << block);
    BlockPolicy policy(block, 0);
    std::vector<engine::LayerProgress> seen;
    engine::RunHooks hooks;
    if (block > 0) hooks.policy = &policy;
    hooks.prefill_layer_progress = [&](const engine::LayerProgress& p) { seen.push_back(p); };
    engine::GenerateOptions options;
    options.max_new_tokens = 2;
    engine.generate(ids, options, hooks);
    // Every layer of every block, none of the decode steps; the share done only grows, and stays below the whole.
    const int blocks = block > 0 ? (n + block - 1) / block : 1;
    REQUIRE(static_cast<int>(seen.size()) == blocks * n_layers);
    for (std::size_t i = 0; i < seen.size(); ++i) {
      CHECK(seen[i].layers_done == static_cast<int>(i) % n_layers);
      CHECK(seen[i].n_layers == n_layers);
      CHECK(seen[i].prompt_tokens == n);
      CHECK(seen[i].block_first == static_cast<int>(i) / n_layers * (block > 0 ? block : n));
      if (i > 0) CHECK(seen[i].fraction() > seen[i - 1].fraction());
    }
    CHECK(seen.front().fraction() == 0.0);
    CHECK(seen.back().fraction() < 1.0);
  }
}
