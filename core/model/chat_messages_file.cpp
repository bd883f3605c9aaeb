#include "core/model/chat_messages_file.h"

#include <fstream>
#include <sstream>

#include "core/common/error.h"
#include "core/common/json_text.h"
#include "core/common/utf8_check.h"

namespace kvscope::model {

std::vector<ChatMessage> parse_chat_messages(const nlohmann::json& json, const std::string& origin) {
  const std::string expected = " (expected a JSON list of {\"role\", \"content\"} objects)";
  if (json.is_object() && json.contains("tools"))
    throw UsageError(origin + " has a tools list: " + kToolCallingUnsupported + expected);
  if (!json.is_array()) throw UsageError(origin + ": the top level is a JSON " + json.type_name() + expected);
  if (json.empty()) throw UsageError(origin + ": the conversation is empty" + expected);
  std::vector<ChatMessage> messages;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const nlohmann::json& m = json[i];
    const std::string where = origin + ": message " + std::to_string(i);
    if (!m.is_object()) throw UsageError(where + " is a JSON " + m.type_name() + expected);
    for (const auto& [key, value] : m.items()) {
      if (key == "tool_calls") throw UsageError(where + " has tool_calls: " + kToolCallingUnsupported);
      if (key != "role" && key != "content")
        throw UsageError(where + ": field '" + key + "' is not supported (kvscope reads role and content only)");
    }
    if (!m.contains("role") || !m["role"].is_string())
      throw UsageError(where + ": field 'role' is missing or not a string" + expected);
    if (!m.contains("content") || !m["content"].is_string())
      throw UsageError(where + ": field 'content' is missing or not a string (content parts are not supported)");
    check_chat_role(m["role"].get<std::string>(), where);
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

std::vector<ChatMessage> read_chat_messages(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UsageError("cannot read messages file '" + file.string() + "'");
  std::ostringstream text;
  text << in.rdbuf();
  // nlohmann names a byte that is not UTF-8 by line and column of its parser; the offset says where it is.
  const std::string wrong = describe_invalid_utf8(text.str());
  if (!wrong.empty()) throw UsageError("messages file '" + file.string() + "': " + wrong + " (expected UTF-8 JSON)");
  nlohmann::json json;
  try {
    json = parse_json_text(text.str(), file.string());
  } catch (const Error& e) {
    throw UsageError(e.what());  // a messages file is the user's input: a usage error
  }
  return parse_chat_messages(json, file.string());
}

}  // namespace kvscope::model
