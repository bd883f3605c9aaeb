#include "core/eval/eval_protocol.h"

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/eval/evidence_tokens.h"
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

// Where the user text sits in its rendered turn: the template is rendered once more around a marker, so text
// it puts before and after the turn (a system prompt, the assistant header) is known, not guessed.
std::vector<TextSegment> user_turn_segments(const model::Model& model, const std::string& text,
                                            const std::string& rendered) {
  const std::string marker = "kvscope-user-text-5d1e9a";
  const std::string framed = as_user_turn(model, marker);
  const auto at = framed.find(marker);
  const std::string before = at == std::string::npos ? "" : framed.substr(0, at);
  const std::string after = at == std::string::npos ? "" : framed.substr(at + marker.size());
  auto segments = user_text_segments(text, rendered, before, after);
  if (segments.empty())
    throw Error(
        "the model's chat template changes the user text, so the sample's evidence cannot be placed in the "
        "rendered prompt; run without the chat template");
  return segments;
}

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
  std::vector<EvidenceText> evidence = parts.evidence;
  // LongBench's pred.py: a prompt longer than max_length tokens keeps its first and last max_length/2 tokens.
  const model::Encoding encoded = parts.evidence.empty() ? model::Encoding{tokenizer.encode_prompt(text), {}}
                                                         : tokenizer.encode_prompt_with_bytes(text);
  const std::vector<int>& ids = encoded.ids;
  if (static_cast<int>(ids.size()) > max_length) {
    const int half = max_length / 2;
    const std::string head = tokenizer.decode(without_bos_eos(tokenizer, {ids.begin(), ids.begin() + half}));
    const std::string tail = tokenizer.decode(without_bos_eos(tokenizer, {ids.end() - half, ids.end()}));
    if (!evidence.empty()) {
      // The original bytes the kept tokens stand for: up to the head's last byte, from the tail's first.
      std::size_t head_end = 0, tail_begin = text.size();
      for (int i = 0; i < half; ++i) head_end = std::max(head_end, encoded.bytes[i].end);
      for (std::size_t i = ids.size() - half; i < ids.size(); ++i)
        if (encoded.bytes[i].end > encoded.bytes[i].begin) tail_begin = std::min(tail_begin, encoded.bytes[i].begin);
      evidence = carry_evidence(evidence, truncation_segments(text, head_end, tail_begin, head, tail));
    }
    text = head + tail;
    out.truncated = true;
  }
  out.chat = chat && has_chat_template(model);
  std::string rendered = (out.chat ? as_user_turn(model, text) : text) + parts.answer_prefix;
  if (out.chat && !evidence.empty())
    evidence = carry_evidence(
        evidence, user_turn_segments(model, text, rendered.substr(0, rendered.size() - parts.answer_prefix.size())));
  // Token bytes are asked for only when there is evidence to place: the plain encoders stay the hot path.
  auto encode_head = [&](const std::string& head) {
    if (parts.evidence.empty())
      return model::Encoding{out.chat ? tokenizer.encode(head, true) : tokenizer.encode_prompt(head), {}};
    return out.chat ? tokenizer.encode_with_bytes(head, true) : tokenizer.encode_prompt_with_bytes(head);
  };
  std::vector<model::TokenBytes> bytes;  // per token of prompt + appended: its bytes of `rendered`
  if (protocol == Protocol::QueryAware) {
    model::Encoding head = encode_head(rendered);
    out.prompt = std::move(head.ids);
    bytes = std::move(head.bytes);
  } else {
    if (parts.question.empty()) throw Error("query-agnostic: this prompt has no question to append after the context");
    const auto at = rendered.rfind(parts.question);
    if (at == std::string::npos || at == 0)
      throw Error("query-agnostic: the question is not intact at the end of the prompt (cut by truncation?); "
                  "raise --max-length or use --protocol query-aware");
    model::Encoding head = encode_head(rendered.substr(0, at));
    out.prompt = std::move(head.ids);
    bytes = std::move(head.bytes);
    if (parts.evidence.empty()) {
      out.appended = tokenizer.encode(rendered.substr(at), true);
    } else {
      model::Encoding appended = tokenizer.encode_with_bytes(rendered.substr(at), true);
      out.appended = std::move(appended.ids);
      for (const model::TokenBytes& b : appended.bytes) bytes.push_back({b.begin + at, b.end + at});
    }
  }
  if (!parts.evidence.empty()) out.evidence = evidence_token_spans(evidence, bytes);
  engine::check_fits_context(out.prompt.size() + out.appended.size(), max_new_tokens, context);
  return out;
}

}  // namespace kvscope::eval
