#pragma once
// A policy run on the real model with a Recorder watching, straight through the engine (not the run pipeline),
// so a test sees exactly what the recorder saw: the trace tests' common set-up.
#include <memory>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/policy/registry.h"
#include "core/trace/recorder.h"

namespace kvscope::test {

// `options` null: nothing is recorded (the run a recording must not change). `extra` observers watch beside the
// recorder. Generates exactly `new_tokens` tokens.
inline engine::RunResult run_with_recorder(const model::Model& model, const std::vector<int>& prompt, const std::string& policy,
                                           const std::string& budget, int new_tokens, const trace::RecordOptions* options,
                                           const std::vector<trace::TraceSink*>& sinks,
                                           const std::vector<engine::RunObserver*>& extra = {}) {
  auto p = policy::make_policy(policy);
  engine::Engine engine(model);
  engine::GenerateOptions generate;
  generate.max_new_tokens = new_tokens;
  generate.stop_at_end_of_generation = false;
  if (!budget.empty()) generate.budget = policy::BudgetSpec::parse(budget);
  engine::RunHooks hooks;
  hooks.policy = p.policy.get();
  std::unique_ptr<trace::Recorder> recorder;
  if (options) {
    trace::RecordedRun run;
    run.name = trace::run_name(policy, budget);
    run.config = model.config;
    run.tokenizer = model.tokenizer.get();
    run.prompt = prompt;
    run.max_new_tokens = new_tokens;
    run.policy = p.policy.get();
    recorder = std::make_unique<trace::Recorder>(*options, sinks, run);
    hooks.observers.push_back(recorder.get());
  }
  hooks.observers.insert(hooks.observers.end(), extra.begin(), extra.end());
  const engine::RunResult result = engine.generate(prompt, generate, hooks);
  if (recorder) recorder->finish(result);
  return result;
}

}  // namespace kvscope::test
