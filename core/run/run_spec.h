#pragma once
// One run as a user describes it — model-independent text and numbers — and the checks that need no
// model. Every front end (kvscope generate, trace, eval, sweep, and the window's worker) describes its runs
// this way and hands them to run::execute (core/run/execute.h); nothing else encodes prompts, checks
// budgets or fills run descriptions.
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/model/model.h"

namespace kvscope::run {

// How the prompt becomes a conversation in the model's chat template (kvscope --chat, --system, --messages,
// --chat-date, --no-think).
struct ChatSpec {
  bool enabled = false;
  std::string system;                        // a system message before the prompt (empty: the template's default)
  std::vector<model::ChatMessage> messages;  // not empty: the whole conversation, instead of system + prompt
  model::ChatSettings settings;              // the template's keyword arguments (date, thinking switch, ...)
  model::ChatTemplateSource template_source;  // --chat-template: instead of the model's (jinja empty: the model's)
  // Special-token text ("<|im_start|>", "<s>") in a plain prompt becomes those tokens, as in transformers and
  // llama.cpp; --no-parse-special (false) keeps it as plain text. A rendered chat is always parsed.
  bool parse_special = true;
};

struct RunSpec {
  std::string policy = "full";        // "snapkv:window=32,kernel=7" (see `kvscope policies`)
  std::string budget;                 // "128" tokens per (layer, KV head) or "20%" of the prompt; empty: whole prompt
  std::string prompt;                 // text; with `chat`, the user message of the model's chat template
  ChatSpec chat;
  std::vector<int> prompt_ids;        // when not empty: the tokens themselves (prompt is then only recorded)
  engine::GenerateOptions generation;  // new tokens, sampling, stopping (its budget is set from `budget`)
  std::string record;                 // trace::RecordOptions spec for recording sinks; empty: defaults
  std::string name;                   // run name; empty: "<policy spec>_b<budget>"
  std::string source = "kvscope";     // who ran it: "kvscope trace", "kvscope gui", ...
  kernels::Device device = kernels::Device::Cpu;  // the compute backend (run::backend_for)
};

// What a spec means before a model is loaded: checked policy, run name, whether the budget applies.
struct CheckedSpec {
  std::string policy_name;  // "snapkv"
  std::string run_name;
  bool uses_budget = false;  // false for the full cache (its budget is the whole prompt)
};

// Throws UsageError naming what is wrong: an unknown policy or parameter, a malformed budget, a policy that
// needs a budget and has none, an empty prompt (no text, conversation or ids).
CheckedSpec check(const RunSpec& spec);

// The spec against a loaded model, before anything is written: the prompt (encoded) and its new tokens fit
// the context, and the budget resolves. Throws UsageError with the engine's words; returns the prompt tokens.
std::vector<int> check_fits(const RunSpec& spec, const model::Model& model);

// The prompt as the model sees it: with chat enabled, chat.messages, or else the body as the user message after
// chat.system as a system message when it is not empty, rendered by the model's chat template with the chat's
// settings (model.chat_template; throws Error when the model has none kvscope renders or refuses the
// conversation).
std::string prompt_text(const model::Model& model, const std::string& body, const ChatSpec& chat);
// Its tokens: a plain prompt with what the tokenizer adds around a sequence (BOS for most models); with chat,
// the rendered text alone (the template writes BOS itself where its family does), as transformers'
// apply_chat_template tokenizes it.
std::vector<int> encode_prompt(const model::Model& model, const std::string& body, const ChatSpec& chat);
// encode_prompt for a run of `max_new_tokens`: a text whose first bytes alone are more tokens than the model's
// context is refused (UsageError) before it is tokenized whole, so a prompt far too long (200,000 messages) is
// refused in a moment instead of after tokenizing megabytes.
std::vector<int> encode_prompt_for_run(const model::Model& model, const std::string& body, const ChatSpec& chat,
                                       int max_new_tokens);
// The same from a tokenizer and chat template alone (kvscope tokenize, which loads no weights).
std::string prompt_text(const model::Tokenizer& tokenizer, const model::ChatTemplateChoice& model_template,
                        const std::string& body, const ChatSpec& chat);
std::vector<int> encode_prompt(const model::Tokenizer& tokenizer, const model::ChatTemplateChoice& model_template,
                               const std::string& body, const ChatSpec& chat);

}  // namespace kvscope::run
