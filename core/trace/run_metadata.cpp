#include "core/trace/run_metadata.h"

#include <unistd.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include "core/common/build_version.h"

namespace kvscope::trace {

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string("unknown");
}

std::string model_sizes(const model::ModelConfig& c) {
  nlohmann::json sizes{{"n_layers", c.n_layers},     {"n_heads", c.n_heads},
                       {"n_kv_heads", c.n_kv_heads}, {"dim", c.dim},
                       {"ffn_dim", c.ffn_dim},       {"head_dim", c.head_dim},
                       {"vocab_size", c.vocab_size}, {"context_length", c.context_length},
                       {"rope_dim", c.rope_dim},     {"rope_base", c.rope_base},
                       {"rms_eps", c.rms_eps},       {"tied_embeddings", c.tied_embeddings}};
  if (c.n_experts > 0) {
    sizes["n_experts"] = c.n_experts;
    sizes["n_experts_used"] = c.n_experts_used;
  }
  return sizes.dump();
}

std::string tokenizer_description(const model::Model& model) {
  std::string text = model.tokenizer_description;
  if (model.tokenizer) text += ", " + std::to_string(model.tokenizer->vocab_size()) + " tokens";
  return text;
}

}  // namespace

std::map<std::string, std::string> run_metadata(const model::Model& model, const RunDescription& run) {
  const bool uses_budget = !run.budget.empty();
  const auto allocation = run.policy_params.find("allocation");
  const auto& s = run.options.sampling;
  std::map<std::string, std::string> out = {
      {"model", model.path().string()},
      {"model_format", model::format_name(model.format())},
      {"model_name", model.config.name},
      {"model_architecture", model.config.architecture},
      {"model_config", model_sizes(model.config)},
      {"model_sha256", model.sha256()},
      {"tokenizer", tokenizer_description(model)},
      {"policy", run.policy_name},
      {"policy_spec", run.policy_spec},
      {"policy_params", nlohmann::json(run.policy_params).dump()},
      {"budget", run.budget},
      {"budget_tokens", std::to_string(uses_budget ? run.options.budget.resolve(run.prompt_tokens, model.config.context_length)
                                                   : run.prompt_tokens)},
      {"allocation", allocation != run.policy_params.end() ? allocation->second : ""},
      {"prompt", run.prompt},
      {"chat", run.chat ? "true" : "false"},
      {"max_new_tokens", std::to_string(run.options.max_new_tokens)},
      {"sampling", nlohmann::json{{"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p}, {"seed", s.seed}}.dump()},
      {"cache_type", kernels::cache_type_name(run.options.cache_type)},
      {"kvscope_version", build_version()},
      {"git_commit", build_git_commit()},
      {"start_time", utc_now()},
      {"host", host_name()},
      {"source", run.source},
  };
  // A user's policy file, so that a figure leads back to the exact scorer (the bytes that were run).
  for (const auto& [key, value] : run.policy_provenance) out[key] = value;
  return out;
}

std::map<std::string, std::string> policy_outcome_metadata(const std::map<std::string, std::string>& metadata,
                                                           const policy::Diagnostics& diagnostics) {
  nlohmann::json settings = nlohmann::json::object();
  const auto params = metadata.find("policy_params");
  if (params != metadata.end() && !params->second.empty()) settings = nlohmann::json::parse(params->second);
  for (const auto& [name, value] : diagnostics.settings()) settings[name] = nlohmann::json::parse(value);
  return {{"effective_settings", settings.dump()}, {"policy_warnings", nlohmann::json(diagnostics.warnings()).dump()}};
}

}  // namespace kvscope::trace
