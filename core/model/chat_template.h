#pragma once
// Chat formatting for instruct models. kvscope has no Jinja engine: it recognises the family of the model's
// chat template by its markers and renders that family's format in C++ (ChatML for SmolLM2 and Qwen2/2.5,
// Qwen3's ChatML with its thinking switch, Llama 2's [INST] <<SYS>>, Llama 3's header tokens, Llama 3.1/3.2/3.3's
// dated system block, Mistral's [INST]). Tool calling, which those templates also carry, is not rendered.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
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
    "tool calling is not supported (kvscope renders no tool branch of a chat template)";
// Throws UsageError for a role kvscope does not render: "tool" and "ipython" (tool results) by name, anything else
// as unknown. `where` names the message, e.g. "messages.json: message 2".
void check_chat_role(const std::string& role, const std::string& where);

enum class ChatFormat { ChatML, Qwen3, Llama2, Llama3, Llama31, Mistral };
// "chatml", "qwen3", "llama2", "llama3", "llama3.1" (Llama 3.1, 3.2 and 3.3 share it), "mistral"
const char* chat_format_name(ChatFormat format);

// The date a Llama 3.1 template writes when given none: its literal `set date_string = "..."` ("26 Jul 2024" in
// Llama 3.1's and 3.3's), or today's when it calls strftime_now (Llama 3.2's).
struct TemplateDateDefault {
  std::string date;
  bool date_is_today = false;
};

struct ChatTemplate {
  ChatFormat format = ChatFormat::ChatML;
  std::string default_system;  // ChatML: the system message the template writes when the conversation has none
  std::string bos, eos;        // token texts the Llama and Mistral templates write
  // Llama 3.1: the "Today Date" the template writes when the caller passes no date_string.
  TemplateDateDefault date_default;
};

// What a user chooses about one rendering besides the messages (transformers' apply_chat_template keywords).
struct ChatSettings {
  std::string date;             // date_string of Llama 3.1+ templates ("DD Mon YYYY"); empty: the template's default
  bool enable_thinking = true;  // false: Qwen3's enable_thinking=False (an empty think block after the prompt)
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

// The family of a template by its markers: <|im_start|> (ChatML; Qwen3 when it also reads enable_thinking),
// <|start_header_id|> (Llama 3; Llama 3.1 with "Cutting Knowledge Date"), [INST] with <<SYS>> (Llama 2) or without
// (Mistral). nullopt for any other template, and for ChatML templates that handle <think> without Qwen3's switch
// (Qwen3-2507, QwQ), whose reasoning rules kvscope does not know.
std::optional<ChatFormat> recognise_chat_template(std::string_view jinja);

// The date default of a Llama 3.1 template; nullopt when it has neither strftime_now nor a literal.
std::optional<TemplateDateDefault> llama31_date_default(std::string_view jinja);

// The system prompt a ChatML template writes as a literal ('<|im_start|>system\n...<|im_end|>' in a Jinja
// string, as SmolLM2's and Qwen2/2.5's do) when the conversation has none; empty when it writes none.
std::string chatml_default_system(std::string_view jinja);

// What --chat uses for a model, and a line for `kvscope info`.
struct ChatTemplateChoice {
  std::optional<ChatTemplate> chat_template;
  std::string description;  // e.g. "llama3 (recognised in chat_template.jinja)"
  // The template, or an Error saying why the model has none kvscope renders.
  const ChatTemplate& get() const;
};
// By the template's markers; a model without a template falls back by architecture (Qwen2/Qwen3: ChatML,
// Mistral: Mistral, Llama: Llama 3 when the vocabulary has <|start_header_id|> as a special token, else
// Llama 2), and the description says so. The description names the Llama 3.1 date and the Qwen3 switch, e.g.
// "llama3.1 (recognised in chat_template.jinja; dated system block, date 26 Jul 2024 unless --chat-date)".
ChatTemplateChoice choose_chat_template(const ChatTemplateSource& source, const std::string& architecture,
                                        const Tokenizer& tokenizer);

// The conversation as the family's template renders it (transformers' apply_chat_template with tokenize=False
// and the settings as keywords); add_generation_prompt appends the assistant header where the family has one.
// Throws Error for a conversation the family's template refuses (Llama 2 and Mistral: roles that do not
// alternate user/assistant after an optional first system message; Llama 3.1: none at all), for a role
// check_chat_role refuses, and for settings the family has no use for (a date outside Llama 3.1, thinking off
// outside Qwen3), which would otherwise be ignored silently.
std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt = true, const ChatSettings& settings = {});

// SmolLM2's ChatML, including its default system prompt.
std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true);

}  // namespace kvscope::model
