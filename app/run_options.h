#pragma once
// Options every model-running subcommand shares: the model, the prompt, generation and the policy.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/policy/policy.h"

namespace kvscope::app {

struct ModelOptions {
  std::string model_path;  // empty: KVSCOPE_MODEL, then the default model
  int threads = 0;
  void add_to(CLI::App* cmd);
  model::Model load() const;
};

struct PromptOptions {
  std::string prompt;
  std::string prompt_file;
  bool chat = false;
  void add_to(CLI::App* cmd);
  // The prompt text (chat-formatted with --chat) and its token ids; throws UsageError without a prompt.
  std::string text() const;
  std::vector<int> tokens(const model::Model& model) const;
};

struct GenerationFlags {
  int max_new_tokens = 64;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string budget;  // "128" or "20%"; empty: the whole prompt
  void add_to(CLI::App* cmd);
  engine::GenerateOptions options() const;
};

// `--allocation NAME` is shorthand for the policy parameter allocation=NAME (the papers combine any token
// scorer with any layer allocation); it is an error to give both.
std::string with_allocation(const std::string& policy_spec, const std::string& allocation);

// The policy's warnings on stderr, one "kvscope: warning:" line each (they are in the trace's metadata too).
void print_policy_warnings(const policy::Policy& policy);

}  // namespace kvscope::app
