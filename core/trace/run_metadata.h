#pragma once
// The provenance attributes of one recorded run (docs/trace-format.md, "/runs/<name>/ Attributes"): which
// model, tokenizer, policy, budget, prompt and settings produced it, and which build on which host. The
// CLI and the GUI both describe their runs through this one function.
#include <map>
#include <string>

#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/policy/diagnostics.h"

namespace kvscope::trace {

struct RunDescription {
  std::string policy_name, policy_spec;
  std::map<std::string, std::string> policy_params;  // every parameter, as text
  std::map<std::string, std::string> policy_provenance;  // a user's policy file: path, kind, SHA-256
  std::string budget;                                // as the user gave it; empty: the whole prompt
  std::string prompt;                                // after the chat template when `chat`
  bool chat = false;
  int prompt_tokens = 0;
  engine::GenerateOptions options;                   // max new tokens, sampling, resolved budget
  std::string source;                                // "kvscope trace", "kvscope gui"
};

std::map<std::string, std::string> run_metadata(const model::Model& model, const RunDescription& run);

// What a policy actually ran with, known once the run is done: `effective_settings`, a JSON object of every
// parameter (from the `policy_params` attribute of `metadata`) overlaid with the policy's derived settings
// (protocol switches, layer budgets, KVMerger's shares and thresholds ...), and `policy_warnings`, a JSON
// array of the departures the policy reported. Two runs of one file compare by these attributes.
std::map<std::string, std::string> policy_outcome_metadata(const std::map<std::string, std::string>& metadata,
                                                           const policy::Diagnostics& diagnostics);

}  // namespace kvscope::trace
