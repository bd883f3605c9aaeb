#pragma once
// The one way a run happens: a RunSpec, a loaded model and the sinks its results go to. It encodes the
// prompt, resolves the budget, builds the policy, describes the run (trace::run_metadata), records it into
// every trace sink, and reuses a captured prefill of the same prompt when it can (prefill_store.h).
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/run/prefill_store.h"
#include "core/run/run_spec.h"
#include "core/trace/trace_sink.h"

namespace kvscope::run {

struct RunSinks {
  std::vector<trace::TraceSink*> traces;        // HDF5 writers, live traces: each receives the whole recording
  std::vector<engine::RunObserver*> observers;  // more observers (evaluation, tests); they see a replayed
                                                // prefill as observations only, never as streamed rows
  std::function<void(const engine::Progress&)> progress;
  std::function<void(const engine::LayerProgress&)> prefill_layer_progress;  // engine::RunHooks's
  const std::atomic<bool>* cancel = nullptr;
  PrefillStore* prefills = nullptr;             // reuse and capture prompts' prefills; null: always run it
};

struct RunOutcome {
  std::string name;                 // the run's name (in traces too)
  std::string policy_name;
  std::vector<int> prompt_tokens;
  engine::RunResult result;
  bool prefill_reused = false;      // the prompt's prefill was replayed from the store
  std::map<std::string, std::string> policy_settings;  // derived settings the policy ran with (JSON values)
  std::vector<std::string> policy_warnings;            // where the run departed from what was asked
};

// Throws UsageError for a bad spec (see check) or a prompt that does not fit the model's context.
RunOutcome execute(const RunSpec& spec, const model::Model& model, const RunSinks& sinks);

// The key under which a run of `spec` on `model` stores and finds its prefill.
PrefillKey prefill_key(const model::Model& model, const std::vector<int>& prompt, const RunSpec& spec, bool recording);

}  // namespace kvscope::run
