#pragma once
// Chat formatting for instruct models: the model's own chat template rendered by Jinja2 itself, in the
// embedded Python interpreter (core/python), with the environment transformers' apply_chat_template uses
// (sandboxed, trim_blocks, lstrip_blocks, loop controls, `{% generation %}`, raise_exception, strftime_now,
// tojson, the tokenizer's special tokens as variables). One engine for every model; a model without a
// template is refused, as transformers refuses it, unless the user gives one (--chat-template FILE).
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::model {

class GgufFile;
class Tokenizer;

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

// Why tool roles, tool calls and tool lists are refused.
inline constexpr const char* kToolCallingUnsupported =
    "tool calling is not supported (kvscope passes no tools and no tool calls to a chat template)";
// Throws UsageError for a role kvscope does not pass: "tool" and "ipython" (tool results) by name, anything
// else as unknown. `where` names the message, e.g. "messages.json: message 2".
void check_chat_role(const std::string& role, const std::string& where);

// What a user chooses about one rendering besides the messages: apply_chat_template's keyword arguments.
struct ChatSettings {
  std::string date;             // date_string ("DD Mon YYYY", Llama 3.1+ templates); empty: not passed
  bool enable_thinking = true;  // false: enable_thinking=False (Qwen3); true: not passed
  // --template-arg name=value: each value is JSON (true, 3, "text", [..]) or, when it does not parse, a string.
  std::map<std::string, std::string> variables;
};

// The Jinja text of a model's chat template and where it was found, e.g. "chat_template.jinja".
struct ChatTemplateSource {
  std::optional<std::string> jinja;
  std::string origin;
};
// Hugging Face folder: chat_template.jinja (what transformers 5 writes), else tokenizer_config.json's
// "chat_template" (a string, or a list of {name, template} whose "default" is used). Throws Error naming the
// file when the field has another shape.
ChatTemplateSource read_chat_template(const std::filesystem::path& folder);
// GGUF: metadata tokenizer.chat_template.
ChatTemplateSource read_chat_template(const GgufFile& file);
// A template file the user gives (--chat-template FILE); throws UsageError naming an unreadable file.
ChatTemplateSource read_chat_template_file(const std::filesystem::path& file);

struct ChatTemplate {
  std::string jinja;
  std::string origin;
  std::map<std::string, std::string> special_tokens;  // bos_token, eos_token: the texts of the model's ids
};

// What --chat uses for a model, and a line for `kvscope info`.
struct ChatTemplateChoice {
  std::optional<ChatTemplate> chat_template;
  std::string description;  // e.g. "Jinja2 template in chat_template.jinja; it reads date_string, enable_thinking"
  // The template, or an Error saying why the model has none (and what to do).
  const ChatTemplate& get() const;
};
// The model's template with the tokenizer's special tokens. Rendering starts the interpreter; choosing does
// not, so a model loads as fast as before.
ChatTemplateChoice choose_chat_template(const ChatTemplateSource& source, const Tokenizer& tokenizer);

// The conversation as the template renders it (apply_chat_template with tokenize=False, no tools). Throws
// Error with the template's own message when it raises (raise_exception) or does not parse (naming its line),
// UsageError for a role check_chat_role refuses and for a setting the template never reads (a --chat-date,
// --no-think or --template-arg it would ignore silently).
std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt = true, const ChatSettings& settings = {});

// The variables the template reads beyond messages, add_generation_prompt, tools, documents and the special
// tokens (e.g. date_string, enable_thinking), sorted; for `kvscope info`.
std::vector<std::string> chat_template_variables(const ChatTemplate& chat_template);

}  // namespace kvscope::model
