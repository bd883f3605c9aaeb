// kvscope generate: run a prompt through the model under a policy and print the continuation.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <utility>

#include "app/logits_npy.h"
#include "app/run_options.h"
#include "app/subcommands.h"
#include "core/common/error.h"
#include "core/common/output_is_input.h"
#include "core/common/utf8_check.h"
#include "core/run/execute.h"

namespace kvscope::app {

namespace {

struct GenerateArgs {
  ModelOptions model;
  PromptOptions prompt;
  GenerationFlags generation;
  std::string policy = "full";
  std::string allocation;
  bool json = false;
  std::string force_tokens;  // teacher forcing: the new tokens' ids, comma-separated
  std::string logits_out;    // .npy of every predicting step's logits
  bool force = false;
};

std::string mib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

// The record holds the prompt as JSON text, which must be UTF-8: a prompt that is not is refused before the
// run, naming where it came from and the byte, instead of failing in the JSON writer after generating.
void check_json_text_inputs(const PromptOptions& options, const run::RunSpec& spec) {
  const std::string source = !options.prompt_file.empty() ? "--prompt-file '" + options.prompt_file + "'" : "--prompt";
  for (const auto& [what, text] : {std::pair{source, spec.prompt}, std::pair{std::string("--system"), spec.chat.system}}) {
    const std::string wrong = describe_invalid_utf8(text);
    if (!wrong.empty())
      throw UsageError(what + ": " + wrong + "; --json writes the prompt into a JSON record, which must be UTF-8 "
                       "(convert it, e.g. iconv -f latin1 -t utf-8)");
  }
}

nlohmann::json result_json(const model::Model& model, const run::RunSpec& spec, const run::RunOutcome& outcome) {
  const engine::RunResult& r = outcome.result;
  nlohmann::json j;
  j["model"] = model.path().string();
  j["prompt"] = run::prompt_text(model, spec.prompt, spec.chat);
  j["prompt_tokens"] = r.prompt_tokens;
  j["generated_tokens"] = r.generated_tokens;
  j["text"] = r.text;
  j["logprobs"] = r.logprobs;
  j["stop_reason"] = r.stop_reason;
  nlohmann::json settings = nlohmann::json::object();
  for (const auto& [name, value] : outcome.policy_settings) settings[name] = nlohmann::json::parse(value);
  j["policy"] = {{"name", outcome.policy_name},
                 {"spec", spec.policy},
                 {"budget", spec.budget},
                 {"derived_settings", settings},
                 {"warnings", outcome.policy_warnings}};
  nlohmann::json steps_by_threads = nlohmann::json::object();
  for (const auto& [threads, steps] : r.decode_steps_by_threads) steps_by_threads[std::to_string(threads)] = steps;
  j["timings"] = {{"prefill_ms", r.prefill_ms},
                  {"prefill_tokens_per_s", r.prefill_ms > 0 ? 1000.0 * r.prompt_tokens.size() / r.prefill_ms : 0.0},
                  {"decode_ms", r.decode_ms},
                  {"decode_ms_per_token", r.decode_ms_per_token()},
                  {"decode_steps_by_threads", steps_by_threads}};
  j["device"] = kernels::device_name(spec.device);
  const kernels::KVCacheTypes types = spec.generation.cache_type;
  j["cache"] = {{"type", kernels::cache_type_name(types)},
                {"type_k", kernels::cache_type_name(types.keys)},
                {"type_v", kernels::cache_type_name(types.values)},
                {"bytes", r.cache_bytes},
                {"entry_bytes", r.cache_entry_bytes},
                {"peak_bytes", r.cache_peak_bytes},
                {"full_cache_bytes", r.full_cache_bytes},
                {"layer_bytes", r.layer_bytes},
                {"layer_entry_bytes", r.layer_entry_bytes},
                {"layer_peak_bytes", r.layer_peak_bytes},
                {"kept", r.kept},
                {"layer_budgets", r.layer_budgets}};
  if (r.cache_page_tokens > 0) {
    j["cache"]["page_tokens"] = r.cache_page_tokens;
    j["cache"]["paged_bytes"] = r.cache_paged_bytes;
    j["cache"]["layer_paged_bytes"] = r.layer_paged_bytes;
    j["cache"]["paged_peak_bytes"] = r.cache_paged_peak_bytes;
    j["cache"]["layer_paged_peak_bytes"] = r.layer_paged_peak_bytes;
  }
  return j;
}

void print_report(const run::RunSpec& spec, const engine::RunResult& r) {
  std::fprintf(stderr, "\n--- policy %s, budget %s ---\n", spec.policy.c_str(), spec.budget.empty() ? "(whole prompt)" : spec.budget.c_str());
  std::fprintf(stderr, "prompt %zu tokens, generated %zu (%s)\n", r.prompt_tokens.size(), r.generated_tokens.size(),
               r.stop_reason.c_str());
  std::fprintf(stderr, "prefill %.1f ms (%.1f tok/s), decode %.2f ms/token\n", r.prefill_ms,
               r.prefill_ms > 0 ? 1000.0 * r.prompt_tokens.size() / r.prefill_ms : 0.0, r.decode_ms_per_token());
  std::fprintf(stderr, "cache allocated now %s (entries %s), peak %s; a full cache of these tokens: %s\n",
               mib(r.cache_bytes).c_str(), mib(r.cache_entry_bytes).c_str(), mib(r.cache_peak_bytes).c_str(),
               mib(r.full_cache_bytes).c_str());
  if (r.cache_page_tokens > 0)
    std::fprintf(stderr, "in pages of %d tokens per layer and KV head: %s now, peak %s\n", r.cache_page_tokens,
                 mib(r.cache_paged_bytes).c_str(), mib(r.cache_paged_peak_bytes).c_str());
  std::fprintf(stderr, "layer  kept per kv head           bytes now     peak\n");
  for (std::size_t l = 0; l < r.kept.size(); ++l) {
    std::string heads;
    for (int k : r.kept[l]) heads += std::to_string(k) + " ";
    std::fprintf(stderr, "%5zu  %-24s %10zu %10zu\n", l, heads.c_str(), r.layer_bytes[l], r.layer_peak_bytes[l]);
  }
}

}  // namespace

Command register_generate(CLI::App& root) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = root.add_subcommand("generate", "generate a continuation of a prompt under a KV-cache policy");
  args->model.add_to(cmd);
  args->prompt.add_to(cmd);
  args->generation.add_to(cmd);
  cmd->add_option("--policy", args->policy, "policy spec, e.g. snapkv:window=32,kernel=7 (see `kvscope policies`)");
  cmd->add_option("--allocation", args->allocation, "layer budget allocation for the policy (uniform, pyramid, d2o, dynamickv, cake)");
  cmd->add_flag("--json", args->json, "print a machine-readable record instead of text");
  cmd->add_option("--force-tokens", args->force_tokens,
                  "teacher forcing: feed these token ids (comma-separated) as the new tokens instead of sampled "
                  "ones, e.g. another run's generated_tokens; --max-new-tokens may not exceed their number");
  cmd->add_option("--logits-out", args->logits_out,
                  "write each predicting step's next-token logits (the prompt's last position, then every new "
                  "token's but the last) as a float32 .npy array [steps, vocab]");
  cmd->add_flag("--force", args->force, "overwrite an existing --logits-out file");

  return {cmd, [args]() {
            run::RunSpec spec =
                args->generation.spec(args->prompt, with_allocation(args->policy, args->allocation), "kvscope generate");
            if (!args->force_tokens.empty())
              spec.generation.forced_tokens = parse_token_ids(args->force_tokens, "--force-tokens");
            run::check(spec);  // before the model loads, so a typo costs nothing
            print_device_path_warning(spec);
            if (args->json) check_json_text_inputs(args->prompt, spec);
            if (!args->logits_out.empty()) {
              refuse_output_that_is_input({"--logits-out", args->logits_out},
                                          run_input_files(&args->model, &args->prompt, {spec.policy}));
              check_output_path(args->logits_out, existing_policy(args->force), "--logits-out");
            }
            const model::Model model = args->model.load();
            LogitsRecorder logits;
            run::RunSinks sinks;
            if (!args->logits_out.empty()) sinks.observers.push_back(&logits);
            const run::RunOutcome outcome = run::execute(spec, model, sinks);
            if (!args->logits_out.empty()) write_logits_npy(args->logits_out, logits, existing_policy(args->force));
            // With --json the warnings are in the record, and stdout stays one JSON document.
            if (!args->json) print_policy_warnings(outcome.policy_warnings);
            if (args->json) {
              std::cout << result_json(model, spec, outcome).dump(2) << "\n";
            } else {
              std::cout << outcome.result.text << std::endl;
              print_report(spec, outcome.result);
            }
            return 0;
          }};
}

}  // namespace kvscope::app
