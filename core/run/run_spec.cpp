#include "core/run/run_spec.h"

#include "core/common/error.h"
#include "core/model/chat_template.h"
#include "core/policy/allocation.h"
#include "core/policy/budget_spec.h"
#include "core/policy/policy_file.h"
#include "core/policy/registry.h"
#include "core/trace/recorder.h"

namespace kvscope::run {

CheckedSpec check(const RunSpec& spec) {
  if (spec.prompt.empty() && spec.chat.messages.empty() && spec.prompt_ids.empty())
    throw UsageError("the prompt is empty");
  const auto policy = policy::make_policy(spec.policy);
  CheckedSpec out;
  out.policy_name = policy.name;
  // allocation=per_layer states every layer's count itself (layer_ratios); any other policy needs the run's budget
  const bool own_budgets = policy.params.has("allocation") &&
                           policy::make_allocation(policy.params.get_choice("allocation"), policy.params)->sets_own_budgets();
  if (policy.name != "full" && spec.budget.empty() && !own_budgets)
    throw UsageError("policy '" + policy.name + "' needs a budget (tokens per layer and KV head, or a percentage)");
  out.uses_budget = policy.name != "full" && !spec.budget.empty();
  if (out.uses_budget) policy::BudgetSpec::parse(spec.budget);
  if (!spec.record.empty()) trace::RecordOptions::parse(spec.record);
  out.run_name = !spec.name.empty() ? spec.name
                                    : trace::run_name(policy.name == "full" ? std::string("full")
                                                                            : policy::display_policy_spec(spec.policy),
                                                      out.uses_budget ? spec.budget : "");
  return out;
}

std::vector<int> check_fits(const RunSpec& spec, const model::Model& model) {
  const CheckedSpec checked = check(spec);
  std::vector<int> tokens = spec.prompt_ids.empty()
                                ? encode_prompt_for_run(model, spec.prompt, spec.chat, spec.generation.max_new_tokens)
                                : spec.prompt_ids;
  const int context = model.config.context_length;
  engine::check_fits_context(tokens.size(), spec.generation.max_new_tokens, context);
  if (checked.uses_budget) policy::BudgetSpec::parse(spec.budget).resolve(static_cast<int>(tokens.size()), context);
  return tokens;
}

std::string prompt_text(const model::Tokenizer& tokenizer, const model::ChatTemplateChoice& model_template,
                        const std::string& body, const ChatSpec& chat) {
  if (!chat.enabled) return body;
  std::vector<model::ChatMessage> messages = chat.messages;
  if (messages.empty()) {
    if (!chat.system.empty()) messages.push_back({"system", chat.system});
    messages.push_back({"user", body});
  }
  if (chat.template_source.jinja) {
    const auto own = model::choose_chat_template(chat.template_source, tokenizer);
    return model::render_chat(own.get(), messages, true, chat.settings);
  }
  return model::render_chat(model_template.get(), messages, true, chat.settings);
}

std::vector<int> encode_prompt(const model::Tokenizer& tokenizer, const model::ChatTemplateChoice& model_template,
                               const std::string& body, const ChatSpec& chat) {
  const std::string text = prompt_text(tokenizer, model_template, body, chat);
  // A rendered chat's markers are tokens whatever parse_special says, or the conversation would not be one.
  return chat.enabled ? tokenizer.encode(text, true) : tokenizer.encode_prompt(text, chat.parse_special);
}

std::string prompt_text(const model::Model& model, const std::string& body, const ChatSpec& chat) {
  return prompt_text(*model.tokenizer, model.chat_template, body, chat);
}

std::vector<int> encode_prompt(const model::Model& model, const std::string& body, const ChatSpec& chat) {
  return encode_prompt(*model.tokenizer, model.chat_template, body, chat);
}

std::vector<int> encode_prompt_for_run(const model::Model& model, const std::string& body, const ChatSpec& chat,
                                       int max_new_tokens) {
  const int context = model.config.context_length;
  // Chat templates write at least one token per message (its role's markers), so a conversation of more messages
  // than the context has tokens cannot fit; it is refused before rendering, which takes seconds at 100,000s.
  if (chat.enabled && chat.messages.size() > static_cast<std::size_t>(context))
    throw UsageError("the conversation of " + std::to_string(chat.messages.size()) +
                     " messages cannot fit the model's context of " + std::to_string(context) +
                     " tokens (every message takes at least one)");
  const std::string text = prompt_text(model, body, chat);
  auto encode = [&](const std::string& t) {
    return chat.enabled ? model.tokenizer->encode(t, true) : model.tokenizer->encode_prompt(t, chat.parse_special);
  };
  // Real text runs 2 to 6 bytes per token; a prefix of 16 bytes per context token that is already more tokens than
  // the context (with a margin for the few tokens the cut may split one into) proves the whole text longer.
  const std::size_t probe = static_cast<std::size_t>(context) * 16;
  if (text.size() > probe) {
    std::size_t cut = probe;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // a whole UTF-8 character
    const std::size_t head = encode(text.substr(0, cut)).size();
    if (static_cast<long>(head) > static_cast<long>(context) + 16)
      throw UsageError("prompt exceeds the model's context of " + std::to_string(context) + " tokens: its first " +
                       std::to_string(cut) + " of " + std::to_string(text.size()) + " bytes" +
                       (chat.messages.empty() ? "" : " (" + std::to_string(chat.messages.size()) + " messages)") +
                       " are already " + std::to_string(head) + " tokens");
  }
  std::vector<int> tokens = encode(text);
  engine::check_fits_context(tokens.size(), max_new_tokens, context);
  return tokens;
}

}  // namespace kvscope::run
