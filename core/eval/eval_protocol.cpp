#include "core/eval/eval_protocol.h"

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/run/run_spec.h"

namespace kvscope::eval {
namespace {

// Tokens without the ones a tokenizer adds around texts (transformers' decode(skip_special_tokens=True) drops
// them when LongBench rebuilds a truncated prompt).
std::vector<int> without_bos_eos(const model::Tokenizer& tokenizer, std::vector<int> ids) {
  std::erase_if(ids, [&](int id) { return id == tokenizer.bos_id() || id == tokenizer.eos_id(); });
  return ids;
}

// The text as the user's turn of the model's chat template (its own template, rendered as `--chat` does).
std::string as_user_turn(const model::Model& model, const std::string& text) {
  run::ChatSpec spec;
  spec.enabled = true;
  return run::prompt_text(model, text, spec);
}

bool has_chat_template(const model::Model& model) { return model.chat_template.chat_template.has_value(); }

}  // namespace

Protocol parse_protocol(const std::string& name) {
  if (name == "query-aware") return Protocol::QueryAware;
  if (name == "query-agnostic") return Protocol::QueryAgnostic;
  throw UsageError("--protocol '" + name + "' (expected query-aware or query-agnostic)");
}

std::string protocol_name(Protocol protocol) {
  return protocol == Protocol::QueryAware ? "query-aware" : "query-agnostic";
}

std::string first_line_if(bool cut, const std::string& text) {
  if (!cut) return text;
  const auto start = text.find_first_not_of('\n');
  if (start == std::string::npos) return "";
  const auto end = text.find('\n', start);
  return text.substr(0, end == std::string::npos ? std::string::npos : end);
}

int wrapping_tokens(const model::Model& model, bool chat) {
  const model::Tokenizer& tokenizer = *model.tokenizer;
  const std::string text = "x";
  const auto bare = tokenizer.encode(text, true).size();
  if (chat && has_chat_template(model))
    return static_cast<int>(tokenizer.encode(as_user_turn(model, text), true).size() - bare);
  return static_cast<int>(tokenizer.encode_prompt(text).size() - bare);
}

PreparedPrompt prepare_prompt(const model::Model& model, const PromptParts& parts, bool chat, Protocol protocol,
                              int max_new_tokens, int max_length) {
  const model::Tokenizer& tokenizer = *model.tokenizer;
  const int context = model.config.context_length;
  if (max_length <= 0) max_length = context - max_new_tokens - 64;
  if (max_length < 2)
    throw UsageError("the model's context of " + std::to_string(context) + " tokens leaves no room for a prompt and " +
                     std::to_string(max_new_tokens) + " new tokens");
  PreparedPrompt out;
  std::string text = parts.text;
  // LongBench's pred.py: a prompt longer than max_length tokens keeps its first and last max_length/2 tokens.
  const std::vector<int> ids = tokenizer.encode_prompt(text);
  if (static_cast<int>(ids.size()) > max_length) {
    const int half = max_length / 2;
    text = tokenizer.decode(without_bos_eos(tokenizer, {ids.begin(), ids.begin() + half})) +
           tokenizer.decode(without_bos_eos(tokenizer, {ids.end() - half, ids.end()}));
    out.truncated = true;
  }
  out.chat = chat && has_chat_template(model);
  std::string rendered = (out.chat ? as_user_turn(model, text) : text) + parts.answer_prefix;
  auto encode_head = [&](const std::string& head) {
    return out.chat ? tokenizer.encode(head, true) : tokenizer.encode_prompt(head);
  };
  if (protocol == Protocol::QueryAware) {
    out.prompt = encode_head(rendered);
  } else {
    if (parts.question.empty()) throw Error("query-agnostic: this prompt has no question to append after the context");
    const auto at = rendered.rfind(parts.question);
    if (at == std::string::npos || at == 0)
      throw Error("query-agnostic: the question is not intact at the end of the prompt (cut by truncation?); "
                  "raise --max-length or use --protocol query-aware");
    out.prompt = encode_head(rendered.substr(0, at));
    out.appended = tokenizer.encode(rendered.substr(at), true);
  }
  engine::check_fits_context(out.prompt.size() + out.appended.size(), max_new_tokens, context);
  return out;
}

}  // namespace kvscope::eval
