#pragma once
// A checkpoint against its transformers golden (tools/make_moe_checkpoints.py, make_gptoss_checkpoint.py): the last
// prompt position's logits and 24 greedy tokens on each prompt, the recorded prefill attention maps of prompt 0
// against eager attention, and, for a mixture of experts, the experts each router chose per prompt token.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/trace/live_trace.h"
#include "tests/support/golden_compare.h"
#include "tests/support/recorder_run.h"

namespace kvscope::test {

// Logits of these models lie within +-8; float32 in a different summation order stays far below this.
constexpr double kLogitTolerance = 2e-3;
constexpr double kAttentionTolerance = 1e-4;

inline double prompt_logit_diff(const model::Model& m, const nlohmann::json& prompt) {
  engine::Engine engine(m);
  const auto logits = engine.prompt_logits(prompt["ids"].get<std::vector<int>>());
  return test::max_abs_diff(logits, prompt["final_logits"].get<std::vector<double>>());
}

// Every (layer, token) routing of the prompt's prefill, as the engine reports it to observers.
struct RoutingLog final : engine::RunObserver {
  std::map<std::pair<int, int>, std::vector<int>> experts;  // {layer, position} -> experts, most probable first
  std::vector<float> weight_sums;
  void on_routing(int layer, const engine::StepInfo&, int first_position, int n_tokens, int k,
                  const engine::ExpertChoice* choices) override {
    for (int t = 0; t < n_tokens; ++t) {
      auto& row = experts[{layer, first_position + t}];
      row.clear();
      float sum = 0;
      for (int j = 0; j < k; ++j) {
        row.push_back(choices[t * k + j].expert);
        sum += choices[t * k + j].weight;
      }
      weight_sums.push_back(sum);
    }
  }
};

// Measured worst differences, for the reports that quote them.
struct GoldenAgreement {
  double logits = 0, attention = 0;
};

inline GoldenAgreement check_against_golden(const nlohmann::json& g, const std::filesystem::path& path) {
  INFO("model " << path);
  const model::Model m = model::load_model(path);
  GoldenAgreement agreement;
  for (const auto& prompt : g["prompts"]) {
    INFO("prompt " << prompt["text"].get<std::string>());
    const double diff = prompt_logit_diff(m, prompt);
    agreement.logits = std::max(agreement.logits, diff);
    INFO("max |logit difference| " << diff);
    CHECK(diff <= kLogitTolerance);

    engine::Engine engine(m);
    engine::GenerateOptions options;
    options.stop_at_end_of_generation = false;
    const auto expected = prompt["greedy"]["ids"].get<std::vector<int>>();
    options.max_new_tokens = static_cast<int>(expected.size());
    const auto result = engine.generate(prompt["ids"].get<std::vector<int>>(), options);
    test::check_greedy_matches(result.generated_tokens, expected,
                               prompt["greedy"]["margin_top1_top2"].get<std::vector<double>>(), kLogitTolerance);
  }

  // The recorded prefill maps of prompt 0 are transformers' eager attention probabilities.
  const nlohmann::json& p0 = g["prompts"][0];
  const auto ids = p0["ids"].get<std::vector<int>>();
  trace::LiveTrace live(std::chrono::milliseconds(0));
  trace::RecordOptions record;
  RoutingLog routing;
  test::run_with_recorder(m, ids, "full", "", 1, &record, {&live}, {&routing});
  const auto t = live.snapshot();
  const auto& attention = p0["attention"];
  REQUIRE(static_cast<int>(attention.size()) == m.config.n_layers);
  double worst = 0;
  for (int l = 0; l < m.config.n_layers; ++l)
    for (int h = 0; h < m.config.n_heads; ++h) {
      const trace::Map2D* map = t->attention_map(l, h);
      REQUIRE(map);
      REQUIRE(map->full_resolution());
      for (std::size_t q = 0; q < ids.size(); ++q)
        for (std::size_t k = 0; k <= q; ++k)
          worst = std::max(worst, std::fabs(map->at(static_cast<int>(q), static_cast<int>(k)) -
                                            attention[l][h][q][k].get<double>()));
    }
  INFO("max |attention difference| " << worst);
  CHECK(worst <= kAttentionTolerance);
  agreement.attention = worst;

  if (!p0.contains("routing")) {
    CHECK(routing.experts.empty());
    return agreement;
  }
  const auto& chosen = p0["routing"];
  for (int l = 0; l < m.config.n_layers; ++l)
    for (std::size_t q = 0; q < ids.size(); ++q) {
      INFO("layer " << l << " position " << q);
      CHECK(routing.experts[{l, static_cast<int>(q)}] == chosen[l][q].get<std::vector<int>>());
    }
  for (float sum : routing.weight_sums) CHECK(sum == Approx(1.0).margin(1e-5));  // every family renormalises
  return agreement;
}

}  // namespace kvscope::test
