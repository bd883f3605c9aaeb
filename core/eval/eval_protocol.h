#pragma once
// How a benchmark prompt (a long context, then a question) reaches the model: middle truncation to a token
// budget (LongBench's rule), the model's chat template or not, and where compression happens:
//   query-aware     the whole prompt is prefilled and compressed at once (LongBench's, RULER's and the
//                   papers' setting: SnapKV-style policies see the question),
//   query-agnostic  the context alone is prefilled and compressed; the question is fed after, token by token,
//                   before the answer (kvpress's protocol: the cache cannot be chosen for the question).
#include <string>
#include <vector>

#include "core/eval/evidence.h"
#include "core/model/model.h"

namespace kvscope::eval {

enum class Protocol { QueryAware, QueryAgnostic };
Protocol parse_protocol(const std::string& name);  // throws UsageError naming the two
std::string protocol_name(Protocol protocol);

struct PromptParts {
  std::string text;           // the whole user prompt (context and question)
  std::string question;       // its tail that asks (must end `text` up to truncation; may be empty for aware)
  std::string answer_prefix;  // written after the chat template's assistant header (RULER), else empty
  std::vector<EvidenceText> evidence{};  // stretches of `text` the answer needs (issue 35); may be empty
};

struct PreparedPrompt {
  std::vector<int> prompt;    // prefilled (and compressed)
  std::vector<int> appended;  // fed after compression (query-agnostic), else empty
  bool truncated = false;     // the middle of the prompt was cut
  bool chat = false;          // rendered with the model's chat template
  // parts.evidence as token positions of prompt + appended; a stretch that truncation cut out is dropped.
  std::vector<EvidenceSpan> evidence;
};

// max_length: 0 for the default, the model's context minus max_new_tokens minus 64 (room for a chat
// template). chat: wrap in the model's template when it has one (a model without one runs the plain prompt).
// Throws Error when the question is not found intact at the end (query-agnostic) or the result does not fit
// the context with max_new_tokens.
PreparedPrompt prepare_prompt(const model::Model& model, const PromptParts& parts, bool chat, Protocol protocol,
                              int max_new_tokens, int max_length);

// Tokens the prompt's wrapping adds to a text: the chat template's markers (and BOS) with `chat` on a model
// that has a template, else what the tokenizer adds around a plain prompt. RULER subtracts them from the
// length before fitting its haystacks (its model_template_token).
int wrapping_tokens(const model::Model& model, bool chat);

// The text up to its first line break when `cut` (generation LongBench stops at a newline), else the text.
std::string first_line_if(bool cut, const std::string& text);

}  // namespace kvscope::eval
