#include "core/model/chat_template.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/common/error.h"
#include "core/model/chat_date.h"
#include "core/model/gguf.h"
#include "core/model/hf_folder.h"
#include "core/model/tokenizer.h"
#include "core/model/tokenizer_bpe.h"

namespace kvscope::model {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kHeaderStart = "<|start_header_id|>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

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

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }
bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}
// Python's str.lstrip('\n'), rstrip('\n') and strip('\n').
std::string_view lstrip_newlines(std::string_view text) {
  return text.substr(std::min(text.find_first_not_of('\n'), text.size()));
}
std::string_view rstrip_newlines(std::string_view text) {
  const size_t last = text.find_last_not_of('\n');
  return last == std::string_view::npos ? std::string_view() : text.substr(0, last + 1);
}
std::string_view strip_newlines(std::string_view text) { return rstrip_newlines(lstrip_newlines(text)); }

// Qwen3's template without tools. Its rule for reasoning: an assistant turn's "<think>...</think>" is cut from
// the answer, and written back (as "<think>\nreasoning\n</think>\n\n") only after the last user query, for
// the final message or a turn that had reasoning; the turns before the last query keep only their answers.
std::string render_qwen3(const std::vector<ChatMessage>& messages, bool generation_prompt, bool enable_thinking) {
  const std::string im_start(kImStart), im_end(kImEnd);
  std::string out;
  if (!messages.empty() && messages.front().role == "system")
    out += im_start + "system\n" + messages.front().content + im_end + "\n";
  // The last user message that is not a wrapped tool response (the template's ns.last_query_index).
  size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string& c = messages[i].content;
    if (messages[i].role == "user" && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      out += im_start + m.role + "\n" + m.content + im_end + "\n";
    } else if (m.role == "assistant") {
      std::string_view content = m.content, reasoning;
      if (content.find(kThinkClose) != std::string_view::npos) {
        // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n'), and what follows the last
        // '</think>' with its leading newlines dropped.
        const std::string_view before = rstrip_newlines(content.substr(0, content.find(kThinkClose)));
        const size_t open = before.rfind(kThinkOpen);
        reasoning = lstrip_newlines(open == std::string_view::npos ? before : before.substr(open + kThinkOpen.size()));
        content = lstrip_newlines(content.substr(content.rfind(kThinkClose) + kThinkClose.size()));
      }
      out += im_start + m.role + "\n";
      if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
        out += "<think>\n" + std::string(strip_newlines(reasoning)) + "\n</think>\n\n" +
               std::string(lstrip_newlines(content));
      } else {
        out += content;
      }
      out += im_end + "\n";
    }
  }
  if (generation_prompt) {
    out += im_start + "assistant\n";
    if (!enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

std::string llama3_turn(const std::string& role, const std::string& content) {
  return std::string(kHeaderStart) + role + "<|end_header_id|>\n\n" + strip(content) + "<|eot_id|>";
}

// Meta's Llama 3 Instruct template: BOS, then per message a role header and the trimmed content.
std::string render_llama3(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool generation_prompt) {
  std::string out = messages.empty() ? "" : t.bos;
  for (const ChatMessage& m : messages) out += llama3_turn(m.role, m.content);
  if (generation_prompt) out += std::string(kHeaderStart) + "assistant<|end_header_id|>\n\n";
  return out;
}

// Meta's Llama 3.1 / 3.2 / 3.3 template without tools: BOS, a system block that is always written (knowledge
// cutoff, today's date, then the first message's content when it is a system message), then the other messages
// as Llama 3 writes them.
std::string render_llama31(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool generation_prompt,
                           const std::string& date) {
  if (messages.empty())
    throw Error("chat template llama3.1: the conversation is empty (the template reads its first message)");
  const bool has_system = messages.front().role == "system";
  std::string out = t.bos + std::string(kHeaderStart) + "system<|end_header_id|>\n\nCutting Knowledge Date: December " +
                    "2023\nToday Date: " + date + "\n\n" + (has_system ? strip(messages.front().content) : "") +
                    "<|eot_id|>";
  for (std::size_t i = has_system ? 1 : 0; i < messages.size(); ++i)
    out += llama3_turn(messages[i].role, messages[i].content);
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

void check_chat_role(const std::string& role, const std::string& where) {
  if (role == "system" || role == "user" || role == "assistant") return;
  if (role == "tool" || role == "ipython")
    throw UsageError(where + " has role '" + role + "': " + kToolCallingUnsupported);
  throw UsageError(where + " has role '" + role + "' (expected system, user or assistant)");
}

const char* chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::ChatML:
      return "chatml";
    case ChatFormat::Qwen3:
      return "qwen3";
    case ChatFormat::Llama2:
      return "llama2";
    case ChatFormat::Llama3:
      return "llama3";
    case ChatFormat::Llama31:
      return "llama3.1";
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
  const auto has = [&](std::string_view marker) { return jinja.find(marker) != std::string_view::npos; };
  if (has(kImStart)) {
    if (has("enable_thinking") && has(kThinkOpen)) return ChatFormat::Qwen3;
    if (has(kThinkOpen)) return std::nullopt;  // reasoning rules other than Qwen3's
    return ChatFormat::ChatML;
  }
  if (has(kHeaderStart)) return has("Cutting Knowledge Date") ? ChatFormat::Llama31 : ChatFormat::Llama3;
  if (jinja.find("[INST]") != std::string_view::npos)
    return jinja.find("<<SYS>>") != std::string_view::npos ? ChatFormat::Llama2 : ChatFormat::Mistral;
  return std::nullopt;
}

std::optional<TemplateDateDefault> llama31_date_default(std::string_view jinja) {
  if (jinja.find("strftime_now") != std::string_view::npos) return TemplateDateDefault{"", true};
  constexpr std::string_view kSet = "date_string = ";
  for (size_t at = jinja.find(kSet); at != std::string_view::npos; at = jinja.find(kSet, at + 1)) {
    const size_t open = at + kSet.size();
    if (open >= jinja.size() || (jinja[open] != '"' && jinja[open] != '\'')) continue;
    const size_t close = jinja.find(jinja[open], open + 1);
    if (close == std::string_view::npos) continue;
    return TemplateDateDefault{std::string(jinja.substr(open + 1, close - open - 1)), false};
  }
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
  TemplateDateDefault date_default;
  if (source.jinja) {
    format = recognise_chat_template(*source.jinja);
    if (!format) {
      choice.description = "the chat template in " + source.origin +
                           " is not one kvscope renders (it recognises ChatML <|im_start|>, Qwen3's ChatML with "
                           "<think> and enable_thinking, Llama 3 <|start_header_id|> and Llama 3.1's \"Cutting "
                           "Knowledge Date\" block, Llama 2 [INST] <<SYS>>, Mistral [INST]; a ChatML template with "
                           "other <think> rules is not rendered)";
      return choice;
    }
    choice.description = std::string(chat_format_name(*format)) + " (recognised in " + source.origin;
    if (*format == ChatFormat::Llama31) {
      const auto date = llama31_date_default(*source.jinja);
      if (!date) {
        choice.description = "the Llama 3.1 chat template in " + source.origin +
                             " sets no default date_string kvscope can read (neither strftime_now nor a literal)";
        return choice;
      }
      date_default = *date;
      choice.description += "; dated system block, date " +
                            (date->date_is_today ? "today (" + today_chat_date() + ")" : date->date) +
                            " unless --chat-date";
    } else if (*format == ChatFormat::Qwen3) {
      choice.description += "; thinking on unless --no-think";
    }
    choice.description += ")";
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
  t.date_default = date_default;
  choice.chat_template = t;
  return choice;
}

std::string render_chat(const ChatTemplate& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const ChatSettings& settings) {
  for (size_t i = 0; i < messages.size(); ++i) check_chat_role(messages[i].role, "message " + std::to_string(i));
  const ChatFormat format = chat_template.format;
  if (!settings.date.empty() && format != ChatFormat::Llama31)
    throw UsageError(std::string("--chat-date: the chat template (") + chat_format_name(format) +
                     ") writes no date; only Llama 3.1, 3.2 and 3.3 templates (llama3.1) do");
  if (!settings.enable_thinking && format != ChatFormat::Qwen3)
    throw UsageError(std::string("--no-think: the chat template (") + chat_format_name(format) +
                     ") has no thinking switch; only Qwen3's (enable_thinking) has");
  switch (format) {
    case ChatFormat::ChatML:
      return render_chatml(chat_template, messages, add_generation_prompt);
    case ChatFormat::Qwen3:
      return render_qwen3(messages, add_generation_prompt, settings.enable_thinking);
    case ChatFormat::Llama3:
      return render_llama3(chat_template, messages, add_generation_prompt);
    case ChatFormat::Llama31: {
      const TemplateDateDefault& d = chat_template.date_default;
      const std::string date = !settings.date.empty() ? checked_chat_date(settings.date)
                               : d.date_is_today      ? today_chat_date()
                                                      : d.date;
      return render_llama31(chat_template, messages, add_generation_prompt, date);
    }
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
