#pragma once
// Options every model-running subcommand shares: the model, the prompt, generation and the policy.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/common/output_is_input.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/run/run_spec.h"

namespace kvscope::app {

struct ModelOptions {
  std::string model_path;  // empty: KVSCOPE_MODEL, then the default model
  int threads = 0;
  bool fixed_threads = false;
  void add_to(CLI::App* cmd);
  model::Model load() const;
  std::filesystem::path path() const;  // --model, else KVSCOPE_MODEL, else the default model
};

struct PromptOptions {
  std::string prompt;
  std::string prompt_file;
  bool chat = false;
  std::string system;         // --system: a system message before the prompt (needs --chat)
  std::string messages_file;  // --messages: the whole conversation as JSON (implies --chat)
  std::string chat_date;      // --chat-date: the Llama 3.1+ template's date
  bool no_think = false;      // --no-think: Qwen3's enable_thinking=False
  std::vector<std::string> template_args;  // --template-arg name=value, passed to the chat template
  std::string chat_template_file;          // --chat-template FILE: instead of the model's template
  bool no_parse_special = false;           // --no-parse-special: special-token text in a plain prompt stays text
  void add_to(CLI::App* cmd);
  // The prompt as given (--prompt, or the file's text), before any chat template; empty with --messages. Throws
  // UsageError without a prompt or for an unreadable file.
  std::string body() const;
  bool chat_enabled() const { return chat || !messages_file.empty(); }
  // The chat flags as a run::ChatSpec, with the --messages file read. Throws UsageError for --chat-date or
  // --no-think without --chat or --messages, a date not of the form DD Mon YYYY, and a bad messages file.
  run::ChatSpec chat_spec() const;
};

// --cache-type, --cache-type-k, --cache-type-v, --cache-rotation: how the KV cache stores keys and values
// (kernels/kv_storage.h).
struct CacheTypeFlags {
  std::string both = "f32";
  std::string keys, values;  // empty: `both`
  std::string rotation = "none";  // "hadamard": both parts stored rotated (a part's `:rot=hadamard` rotates one)
  int page_tokens = 0;       // --cache-page N (engine::GenerateOptions::cache_page_tokens)
  void add_to(CLI::App* cmd);
  // Throws UsageError naming an unknown type and the choices.
  kernels::KVCacheTypes types() const;
};

struct GenerationFlags {
  int max_new_tokens = 64;
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string budget;  // "128", "20%" or "cr:0.25" (--compression-ratio); empty: the whole prompt
  std::string device = "cpu";      // the compute backend (kernels/backend.h)
  CacheTypeFlags cache_type;
  void add_to(CLI::App* cmd);
  engine::GenerateOptions options() const;
  // A run of `policy` on the prompt with these settings (core/run/run_spec.h). Throws UsageError for an unknown
  // device or cache type.
  run::RunSpec spec(const PromptOptions& prompt, const std::string& policy, const std::string& source) const;
};

// `--budget B` and `--compression-ratio R` (kvpress's rule: keep int(n * (1 - R)) of an n-token prompt) on one
// command, exclusive; either fills `budget` ("cr:R" for the ratio, which a run records as its budget).
void add_budget_options(CLI::App* cmd, std::string& budget, const std::string& budget_help);

// `--allocation NAME` is shorthand for the policy parameter allocation=NAME (the papers combine any token
// scorer with any layer allocation); it is an error to give both.
std::string with_allocation(const std::string& policy_spec, const std::string& allocation);

// The files a run reads, each with its option (--model, --prompt-file, --messages, --chat-template, and the file of
// each python:/plugin: --policy), for refuse_output_that_is_input. `model` or `prompt` may be null.
std::vector<NamedPath> run_input_files(const ModelOptions* model, const PromptOptions* prompt,
                                       const std::vector<std::string>& policies);

// unverified_device_note's warning for this run's device and cache type on stderr ("kvscope: warning: ..."), if any.
void print_device_path_warning(const run::RunSpec& spec);

// The policy's warnings on stderr, one "kvscope: warning:" line each (they are in the trace's metadata too).
void print_policy_warnings(const std::vector<std::string>& warnings);

}  // namespace kvscope::app
