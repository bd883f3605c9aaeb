#include "app/run_options.h"

#include "app/number_checks.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/common/error.h"
#include "core/model/chat_date.h"
#include "core/model/chat_messages_file.h"
#include "core/policy/budget_spec.h"
#include "core/policy/policy_file.h"

namespace kvscope::app {

void ModelOptions::add_to(CLI::App* cmd) {
  cmd->add_option("--model", model_path, "GGUF file or Hugging Face folder (default: $KVSCOPE_MODEL, then SmolLM2-135M-Instruct)");
  cmd->add_option("--threads", threads, "threads for the kernels and BLAS (0 = all cores, or $OMP_NUM_THREADS)")->check(kNonNegative);
  cmd->add_flag("--fixed-threads", fixed_threads,
                "every decode step uses all --threads (by default a step uses fewer when that is faster, as when "
                "other processes share the cores)");
}

std::filesystem::path ModelOptions::path() const { return model::resolve_model_path(model_path); }

model::Model ModelOptions::load() const {
  engine::set_threads(threads, !fixed_threads);
  return model::load_model(path());
}

void PromptOptions::add_to(CLI::App* cmd) {
  auto* text_opt = cmd->add_option("--prompt", prompt, "prompt text");
  auto* file_opt = cmd->add_option("--prompt-file", prompt_file, "read the prompt from a file");
  text_opt->excludes(file_opt);
  auto* chat_opt = cmd->add_flag("--chat", chat,
                                 "wrap the prompt as a user message in the model's chat template, rendered by "
                                 "Jinja2 as transformers renders it (see `kvscope info`)");
  auto* system_opt =
      cmd->add_option("--system", system,
                      "with --chat: a system message before the prompt (default: the template's own, if it has one)")
          ->needs(chat_opt);
  cmd->add_option("--messages", messages_file,
                  "a whole conversation as a JSON list of {\"role\", \"content\"} (system, user, assistant) in the "
                  "model's chat template; implies --chat")
      ->excludes(text_opt)
      ->excludes(file_opt)
      ->excludes(system_opt);
  cmd->add_option("--chat-date", chat_date,
                  "with --chat or --messages on a template that reads date_string (Llama 3.1/3.2/3.3): its date, "
                  "DD Mon YYYY (default: the template's own, 26 Jul 2024 for Llama 3.1 and 3.3, today for 3.2)");
  cmd->add_flag("--no-think", no_think,
                "with --chat or --messages on a template that reads enable_thinking (Qwen3): thinking off "
                "(enable_thinking=False)");
  cmd->add_option("--template-arg", template_args,
                  "with --chat or --messages: a variable for the chat template, name=value (value as JSON: true, 3, "
                  "\"text\"; anything else as text), as apply_chat_template's keyword arguments; repeatable");
  cmd->add_flag("--no-parse-special", no_parse_special,
                "read special-token text in a plain prompt (\"<|im_start|>\", \"<s>\") as plain text instead of "
                "those tokens (transformers' split_special_tokens=True); a rendered chat is always parsed");
  cmd->add_option("--chat-template", chat_template_file,
                  "with --chat or --messages: render with this Jinja template file instead of the model's (a model "
                  "without a template needs one)");
}

run::ChatSpec PromptOptions::chat_spec() const {
  run::ChatSpec spec;
  spec.enabled = chat_enabled();
  if (!spec.enabled && !chat_date.empty()) throw UsageError("--chat-date needs --chat or --messages");
  if (!spec.enabled && no_think) throw UsageError("--no-think needs --chat or --messages");
  spec.system = system;
  if (!messages_file.empty()) spec.messages = model::read_chat_messages(messages_file);
  if (!chat_date.empty()) spec.settings.date = model::checked_chat_date(chat_date);
  spec.settings.enable_thinking = !no_think;
  spec.parse_special = !no_parse_special;
  if (!spec.enabled && !template_args.empty()) throw UsageError("--template-arg needs --chat or --messages");
  if (!spec.enabled && !chat_template_file.empty()) throw UsageError("--chat-template needs --chat or --messages");
  for (const auto& arg : template_args) {
    const auto eq = arg.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError("--template-arg '" + arg + "' is not of the form name=value");
    spec.settings.variables[arg.substr(0, eq)] = arg.substr(eq + 1);
  }
  if (!chat_template_file.empty()) spec.template_source = model::read_chat_template_file(chat_template_file);
  return spec;
}

std::string PromptOptions::body() const {
  if (!messages_file.empty()) return "";
  std::string text = prompt;
  if (!prompt_file.empty()) {
    std::ifstream in(prompt_file, std::ios::binary);
    if (!in) throw UsageError("cannot read prompt file '" + prompt_file + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  if (text.empty()) throw UsageError("no prompt: pass --prompt TEXT, --prompt-file FILE or --messages FILE");
  return text;
}

void GenerationFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--max-new-tokens", max_new_tokens, "tokens to generate")->check(kNonNegative);
  cmd->add_option("--temperature", temperature, "sampling temperature (0 = greedy)")->check(kNonNegative);
  cmd->add_option("--top-k", top_k, "sample from the k most likely tokens (0 = all)")->check(kNonNegative);
  cmd->add_option("--top-p", top_p, "nucleus sampling mass")->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--seed", seed, "random seed for sampling");
  cmd->add_flag("--ignore-eos", ignore_eos, "keep generating past end-of-generation tokens");
  add_budget_options(cmd, budget, "KV tokens per layer and KV head (e.g. 128) or share of the prompt (e.g. 20%)");
  cmd->add_option("--device", device, "compute backend: cpu (default) or cuda");
  cache_type.add_to(cmd);
}

void CacheTypeFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--cache-type", both,
                  "how the KV cache stores keys and values: f32 (default, exact), f16 or bf16 (half the memory "
                  "and bandwidth), or llama.cpp's blocks of 32 values q8_0, q4_0, q4_1 (8.5, 4.5, 5 bits a value; "
                  "head_dim a multiple of 32), or KIVI's kivi2, kivi4 (keys per channel, values per token, the newest "
                  "tokens in full precision; options kivi2:group=32,residual=128); attention still accumulates in "
                  "float32");
  cmd->add_option("--cache-type-k", keys, "how the KV cache stores keys (default: --cache-type)");
  cmd->add_option("--cache-type-v", values, "how the KV cache stores values (default: --cache-type)");
  cmd->add_option("--cache-rotation", rotation,
                  "hadamard: store keys and values Hadamard-rotated (blocks of up to head_dim for keys, 64 for "
                  "values, as llama.cpp does for its quantized cache), which spreads a row's outlier dimensions over "
                  "its blocks before they are quantized; attention and policies see the same values up to rounding, "
                  "bytes are unchanged. One part only: --cache-type-k q4_0:rot=hadamard. Default none")
      ->check(CLI::IsMember({"none", "hadamard"}));
  cmd->add_option("--cache-page", page_tokens,
                  "also report the cache's physical bytes in pages of N tokens per layer and KV head, as a paged "
                  "serving engine would allocate it (each part paged apart; KIVI keys: N a multiple of the group)")
      ->check(CLI::PositiveNumber);}

kernels::KVCacheTypes CacheTypeFlags::types() const {
  kernels::KVCacheTypes types = kernels::parse_cache_types(both, keys, values);
  if (rotation == "hadamard") types.rotate_keys = types.rotate_values = true;
  return types;
}

void add_budget_options(CLI::App* cmd, std::string& budget, const std::string& budget_help) {
  CLI::Option* tokens_or_share =
      cmd->add_option("--budget", budget, budget_help + "; a share rounds to the nearest token");
  cmd->add_option_function<std::string>(
         "--compression-ratio",
         [&budget](const std::string& ratio) { budget = policy::BudgetSpec::compression_ratio_text(ratio); },
         "share of the prompt's tokens to remove, as kvpress states it: keeps int(n * (1 - R)) of n tokens "
         "(the budget 'cr:R')")
      ->excludes(tokens_or_share);
}

engine::GenerateOptions GenerationFlags::options() const {
  engine::GenerateOptions o;
  o.max_new_tokens = max_new_tokens;
  o.sampling = {temperature, top_k, top_p, seed};
  o.stop_at_end_of_generation = !ignore_eos;
  o.cache_type = cache_type.types();
  o.cache_page_tokens = cache_type.page_tokens;
  return o;
}

run::RunSpec GenerationFlags::spec(const PromptOptions& prompt, const std::string& policy, const std::string& source) const {
  run::RunSpec s;
  s.device = kernels::parse_device(device);
  s.policy = policy;
  s.budget = budget;
  s.prompt = prompt.body();
  s.chat = prompt.chat_spec();
  s.generation = options();
  s.source = source;
  return s;
}

std::string with_allocation(const std::string& policy_spec, const std::string& allocation) {
  if (allocation.empty()) return policy_spec;
  if (policy_spec.find("allocation=") != std::string::npos)
    throw UsageError("policy spec '" + policy_spec + "' already sets allocation=; drop --allocation " + allocation);
  return policy_spec + (policy_spec.find(':') == std::string::npos ? ":" : ",") + "allocation=" + allocation;
}

void print_device_path_warning(const run::RunSpec& spec) {
  const std::string note = kernels::unverified_device_note(spec.device, spec.generation.cache_type);
  if (!note.empty()) std::fprintf(stderr, "kvscope: warning: %s\n", note.c_str());
}

void print_policy_warnings(const std::vector<std::string>& warnings) {
  for (const auto& w : warnings) std::fprintf(stderr, "kvscope: warning: %s\n", w.c_str());
}

std::vector<NamedPath> run_input_files(const ModelOptions* model, const PromptOptions* prompt,
                                       const std::vector<std::string>& policies) {
  std::vector<NamedPath> files;
  if (model) {
    try {
      files.push_back({"--model", model->path()});
    } catch (const std::exception&) {
      files.push_back({"--model", model->model_path});  // no model found: loading it reports that
    }
  }
  if (prompt) {
    files.push_back({"--prompt-file", prompt->prompt_file});
    files.push_back({"--messages", prompt->messages_file});
    files.push_back({"--chat-template", prompt->chat_template_file});
  }
  for (const auto& policy : policies) {
    try {
      if (const auto spec = policy::parse_policy_file_spec(policy)) files.push_back({"--policy", spec->path});
    } catch (const UsageError&) {  // a malformed spec is reported where the policy is made
    }
  }
  return files;
}

}  // namespace kvscope::app
