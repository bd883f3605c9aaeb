#include "core/model/chat_template.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/common/error.h"
#include "core/model/gguf.h"
#include "core/model/hf_folder.h"
#include "core/model/tokenizer.h"
#include "core/model/tokenizer_bpe.h"

namespace kvscope::model {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kHeaderStart = "<|start_header_id|>";

// Jinja's trim filter and Python's str.strip(): Unicode whitespace, plus the separators U+001C..U+001F that
// Python's isspace() also counts.
std::string strip(std::string_view text) {
  auto is_space = [](char32_t cp) { return unicode::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); };
  size_t begin = 0;
  while (begin < text.size()) {
    const auto ch = unicode::decode_utf8(text, begin);
    if (ch.invalid || !is_space(ch.cp)) break;
    begin += ch.length;
  }
  size_t end = begin;
  for (size_t pos = begin; pos < text.size();) {
    const auto ch = unicode::decode_utf8(text, pos);
    pos += ch.length;
    if (ch.invalid || !is_space(ch.cp)) end = pos;
  }
  return std::string(text.substr(begin, end - begin));
}

std::string render_chatml(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool generation_prompt) {
  std::string out;
  if (!t.default_system.empty() && !messages.empty() && messages.front().role != "system")
    out += std::string(kImStart) + "system\n" + t.default_system + std::string(kImEnd) + "\n";
  for (const ChatMessage& m : messages)
    out += std::string(kImStart) + m.role + "\n" + m.content + std::string(kImEnd) + "\n";
  if (generation_prompt) out += std::string(kImStart) + "assistant\n";
  return out;
}

// Meta's Llama 3 Instruct template: BOS, then per message a role header and the trimmed content.
std::string render_llama3(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool generation_prompt) {
  std::string out = messages.empty() ? "" : t.bos;
  for (const ChatMessage& m : messages)
    out += std::string(kHeaderStart) + m.role + "<|end_header_id|>\n\n" + strip(m.content) + "<|eot_id|>";
  if (generation_prompt) out += std::string(kHeaderStart) + "assistant<|end_header_id|>\n\n";
  return out;
}

// Llama 2 and Mistral take an optional system message first, then strictly alternating user/assistant turns.
std::vector<ChatMessage> alternating_turns(const std::vector<ChatMessage>& messages, const char* family,
                                           std::optional<std::string>& system) {
  std::vector<ChatMessage> turns = messages;
  if (!turns.empty() && turns.front().role == "system") {
    system = turns.front().content;
    turns.erase(turns.begin());
  }
  for (size_t i = 0; i < turns.size(); ++i)
    if (turns[i].role != (i % 2 == 0 ? "user" : "assistant"))
      throw Error(std::string("chat template ") + family + ": message " + std::to_string(i + (system ? 1 : 0)) +
                  " has role '" + turns[i].role +
                  "' (expected an optional system message, then user and assistant turns alternating)");
  return turns;
}

// Meta's Llama 2 chat template: the system message in <<SYS>> inside the first [INST]; the template has no
// generation prompt (the text ends with " [/INST]" either way).
std::string render_llama2(const ChatTemplate& t, const std::vector<ChatMessage>& messages) {
  std::optional<std::string> system;
  const auto turns = alternating_turns(messages, "llama2", system);
  std::string out;
  for (size_t i = 0; i < turns.size(); ++i) {
    std::string content = turns[i].content;
    if (i == 0 && system) content = "<<SYS>>\n" + *system + "\n<</SYS>>\n\n" + content;
    if (turns[i].role == "user") {
      out += t.bos + "[INST] " + strip(content) + " [/INST]";
    } else {
      out += " " + strip(content) + " " + t.eos;
    }
  }
  return out;
}

// Mistral Instruct: BOS once, "[INST] user [/INST]", the answer followed by EOS; a system message goes before the
// first user message, separated by a blank line.
std::string render_mistral(const ChatTemplate& t, const std::vector<ChatMessage>& messages) {
  std::optional<std::string> system;
  const auto turns = alternating_turns(messages, "mistral", system);
  std::string out = t.bos;
  for (size_t i = 0; i < turns.size(); ++i) {
    if (turns[i].role == "user") {
      out += "[INST] " + (i == 0 && system ? *system + "\n\n" : std::string()) + turns[i].content + " [/INST]";
    } else {
      out += turns[i].content + t.eos;
    }
  }
  return out;
}

// True when `text` is one special token of the vocabulary (matched only when special tokens are parsed).
bool is_special_token(const Tokenizer& tokenizer, const std::string& text) {
  return tokenizer.encode(text, true).size() == 1 && tokenizer.encode(text, false).size() > 1;
}

std::string token_or_empty(const Tokenizer& tokenizer, int id) { return id >= 0 ? tokenizer.token_text(id) : ""; }

}  // namespace

const char* chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::ChatML:
      return "chatml";
    case ChatFormat::Llama2:
      return "llama2";
    case ChatFormat::Llama3:
      return "llama3";
    case ChatFormat::Mistral:
      return "mistral";
  }
  return "unknown";
}

ChatTemplateSource read_chat_template(const std::filesystem::path& folder) {
  std::error_code ec;
  const auto jinja_file = folder / "chat_template.jinja";
  if (std::filesystem::is_regular_file(jinja_file, ec)) {
    std::ifstream in(jinja_file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) throw Error(jinja_file.string() + ": cannot be read");
    return {text.str(), "chat_template.jinja"};
  }
  const auto config_file = folder / "tokenizer_config.json";
  if (!std::filesystem::is_regular_file(config_file, ec)) return {std::nullopt, ""};
  const nlohmann::json config = read_json_file(config_file);
  if (!config.is_object() || !config.contains("chat_template") || config["chat_template"].is_null())
    return {std::nullopt, ""};
  const auto& field = config["chat_template"];
  const std::string origin = "tokenizer_config.json chat_template";
  if (field.is_string()) return {field.get<std::string>(), origin};
  if (field.is_array())
    for (const auto& named : field)
      if (named.is_object() && named.value("name", std::string()) == "default" && named.contains("template") &&
          named["template"].is_string())
        return {named["template"].get<std::string>(), origin + " (\"default\")"};
  throw Error(config_file.string() + ": field 'chat_template': " + field.dump().substr(0, 120) +
              " (expected a string, or a list of {name, template} with one named \"default\")");
}

ChatTemplateSource read_chat_template(const GgufFile& file) {
  if (!file.has("tokenizer.chat_template")) return {std::nullopt, ""};
  return {file.get_string("tokenizer.chat_template"), "GGUF tokenizer.chat_template"};
}

std::string chatml_default_system(std::string_view jinja) {
  const std::string marker = std::string(kImStart) + "system";
  for (size_t at = jinja.find(marker); at != std::string_view::npos; at = jinja.find(marker, at + 1)) {
    size_t begin = at + marker.size();
    if (jinja.substr(begin, 2) == "\\n") {
      begin += 2;
    } else if (jinja.substr(begin, 1) == "\n") {
      begin += 1;
    } else {
      continue;
    }
    const size_t end = jinja.find(kImEnd, begin);
    if (end == std::string_view::npos) continue;
    const std::string_view literal = jinja.substr(begin, end - begin);
    if (literal.empty() || literal.find_first_of("'\"{}") != std::string_view::npos) continue;  // not a literal
    std::string out;
    for (size_t i = 0; i < literal.size(); ++i) {
      if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'n') {
        out += '\n';
        ++i;
      } else {
        out += literal[i];
      }
    }
    return out;
  }
  return {};
}

std::optional<ChatFormat> recognise_chat_template(std::string_view jinja) {
  if (jinja.find(kImStart) != std::string_view::npos) return ChatFormat::ChatML;
  if (jinja.find(kHeaderStart) != std::string_view::npos) {
    if (jinja.find("Cutting Knowledge Date") != std::string_view::npos) return std::nullopt;  // Llama 3.1+
    return ChatFormat::Llama3;
  }
  if (jinja.find("[INST]") != std::string_view::npos)
    return jinja.find("<<SYS>>") != std::string_view::npos ? ChatFormat::Llama2 : ChatFormat::Mistral;
  return std::nullopt;
}

const ChatTemplate& ChatTemplateChoice::get() const {
  if (!chat_template) throw Error("--chat: " + description);
  return *chat_template;
}

ChatTemplateChoice choose_chat_template(const ChatTemplateSource& source, const std::string& architecture,
                                        const Tokenizer& tokenizer) {
  ChatTemplateChoice choice;
  std::optional<ChatFormat> format;
  if (source.jinja) {
    format = recognise_chat_template(*source.jinja);
    if (!format) {
      choice.description = "the chat template in " + source.origin +
                           " is not one kvscope renders (it recognises ChatML <|im_start|>, Llama 3 "
                           "<|start_header_id|> without Llama 3.1's dated system block, Llama 2 [INST] <<SYS>>, "
                           "Mistral [INST])";
      return choice;
    }
    choice.description = std::string(chat_format_name(*format)) + " (recognised in " + source.origin + ")";
  } else {
    if (architecture == "Qwen2ForCausalLM" || architecture == "Qwen3ForCausalLM" || architecture == "qwen2" ||
        architecture == "qwen3") {
      format = ChatFormat::ChatML;
    } else if (architecture == "MistralForCausalLM" || architecture == "mistral") {
      format = ChatFormat::Mistral;
    } else if (architecture == "LlamaForCausalLM" || architecture == "llama") {
      format = is_special_token(tokenizer, std::string(kHeaderStart)) ? ChatFormat::Llama3 : ChatFormat::Llama2;
    }
    if (!format) {
      choice.description = "the model has no chat template, and architecture '" + architecture + "' has no default";
      return choice;
    }
    choice.description = std::string(chat_format_name(*format)) + " (the model has no chat template; chosen by " +
                         "architecture " + architecture + ")";
  }
  ChatTemplate t;
  t.format = *format;
  if (source.jinja && *format == ChatFormat::ChatML) t.default_system = chatml_default_system(*source.jinja);
  t.bos = token_or_empty(tokenizer, tokenizer.bos_id());
  t.eos = token_or_empty(tokenizer, tokenizer.eos_id());
  choice.chat_template = t;
  return choice;
}

std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt) {
  switch (chat_template.format) {
    case ChatFormat::ChatML:
      return render_chatml(chat_template, messages, add_generation_prompt);
    case ChatFormat::Llama3:
      return render_llama3(chat_template, messages, add_generation_prompt);
    case ChatFormat::Llama2:
      return render_llama2(chat_template, messages);
    case ChatFormat::Mistral:
      return render_mistral(chat_template, messages);
  }
  return {};
}

std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  ChatTemplate smollm2;
  smollm2.default_system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
  return render_chat(smollm2, messages, add_generation_prompt);
}

}  // namespace kvscope::model
