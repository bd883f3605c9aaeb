// The five score-based baselines on the real model: kept lengths follow the budgets layer by layer, the
// first token (sampled from the exact prefill pass) is full's, and a budget that holds the whole run
// changes nothing at all.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "tests/support/default_model.h"
#include "core/policy/registry.h"

using namespace kvscope;

namespace {

constexpr int kNewTokens = 24;

engine::RunResult generate(const model::Model& model, const std::vector<int>& prompt, policy::Policy* policy,
                           const std::string& budget) {
  engine::Engine engine(model);
  engine::GenerateOptions options;
  options.max_new_tokens = kNewTokens;
  options.stop_at_end_of_generation = false;  // always 24 tokens, so lengths are known
  if (!budget.empty()) options.budget = policy::BudgetSpec::parse(budget);
  engine::RunHooks hooks;
  hooks.policy = policy;
  return engine.generate(prompt, options, hooks);
}

bool compresses_once(const std::string& name) { return name == "snapkv" || name == "pyramidkv"; }

}  // namespace

TEST_CASE("baseline policies on SmolLM2 at half the prompt", "[e2e][policy]") {
  const model::Model* model = test::default_model();
  const auto& c = model->config;
  const std::vector<int> prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  const int n = static_cast<int>(prompt.size());
  REQUIRE(n >= 120);
  const engine::RunResult full = generate(*model, prompt, nullptr, "");
  REQUIRE(full.generated_tokens.size() == static_cast<std::size_t>(kNewTokens));
  const int budget = static_cast<int>(std::lround(0.5 * n));
  const int decode_steps = kNewTokens - 1;  // the last token is sampled, never fed back

  for (const std::string name : {"streaming_llm", "h2o", "tova", "snapkv", "pyramidkv"}) {
    INFO(name << ", prompt " << n << " tokens, budget " << budget);
    auto inst = policy::make_policy(name);
    const engine::RunResult r = generate(*model, prompt, inst.policy.get(), "50%");
    REQUIRE(r.generated_tokens.size() == static_cast<std::size_t>(kNewTokens));
    // The prompt runs in one exact pass before any eviction, so the first token cannot differ.
    CHECK(r.generated_tokens[0] == full.generated_tokens[0]);

    REQUIRE(static_cast<int>(r.layer_budgets.size()) == c.n_layers);
    CHECK(std::accumulate(r.layer_budgets.begin(), r.layer_budgets.end(), 0L) == static_cast<long>(c.n_layers) * budget);
    for (int l = 0; l < c.n_layers; ++l) {
      if (name == "pyramidkv") {
        if (l > 0) CHECK(r.layer_budgets[l] <= r.layer_budgets[l - 1]);
      } else {
        CHECK(r.layer_budgets[l] == budget);
      }
      // Every-step policies hold their budget; SnapKV-style ones append the decode tokens behind it.
      const int want = r.layer_budgets[l] + (compresses_once(name) ? decode_steps : 0);
      for (int h = 0; h < c.n_kv_heads; ++h) CHECK(r.kept[l][h] == want);
    }
    if (name == "pyramidkv") CHECK(r.layer_budgets.front() > r.layer_budgets.back());
  }
}

TEST_CASE("baseline policies with a budget that holds the run generate exactly what full does", "[e2e][policy]") {
  const model::Model* model = test::default_model();
  const std::vector<int> prompt = test::sample_prompt_tokens(*model, "lighthouse_story.txt");
  const engine::RunResult full = generate(*model, prompt, nullptr, "");
  const int n = static_cast<int>(prompt.size());
  for (const std::string name : {"streaming_llm", "h2o", "tova", "snapkv", "pyramidkv"}) {
    // Every-step policies need room for the generated tokens too; SnapKV-style ones only for the prompt.
    const std::string budget = compresses_once(name) ? "100%" : std::to_string(n + kNewTokens);
    INFO(name << " budget " << budget);
    auto inst = policy::make_policy(name);
    const engine::RunResult r = generate(*model, prompt, inst.policy.get(), budget);
    CHECK(r.generated_tokens == full.generated_tokens);
    CHECK(r.text == full.text);
    for (const auto& layer : r.kept)
      for (int kept : layer) CHECK(kept == n + kNewTokens - 1);
  }
}
