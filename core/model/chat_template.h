#pragma once
// Chat formatting for instruct models. kvscope has no Jinja engine: it recognises the family of the model's
// chat template by its markers and renders that family's format in C++ (ChatML for SmolLM2 and Qwen2/2.5/3,
// Llama 2's [INST] <<SYS>>, Llama 3's header tokens, Mistral's [INST]).
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

enum class ChatFormat { ChatML, Llama2, Llama3, Mistral };
const char* chat_format_name(ChatFormat format);  // "chatml", "llama2", "llama3", "mistral"

struct ChatTemplate {
  ChatFormat format = ChatFormat::ChatML;
  std::string default_system;  // ChatML: the system message the template writes when the conversation has none
  std::string bos, eos;        // token texts the Llama and Mistral templates write
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

// The family of a template by its markers: <|im_start|> (ChatML), <|start_header_id|> (Llama 3), [INST] with
// <<SYS>> (Llama 2) or without (Mistral). nullopt for any other template, and for Llama 3.1's, whose dated
// system block kvscope does not render.
std::optional<ChatFormat> recognise_chat_template(std::string_view jinja);

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
// Llama 2), and the description says so.
ChatTemplateChoice choose_chat_template(const ChatTemplateSource& source, const std::string& architecture,
                                        const Tokenizer& tokenizer);

// The conversation as the family's template renders it (transformers' apply_chat_template with tokenize=False);
// add_generation_prompt appends the assistant header where the family has one. Throws Error for a conversation
// the family's template refuses (Llama 2 and Mistral: roles that do not alternate user/assistant after an
// optional first system message).
std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt = true);

// SmolLM2's ChatML, including its default system prompt.
std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true);

}  // namespace kvscope::model
