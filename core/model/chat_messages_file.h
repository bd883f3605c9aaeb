#pragma once
// A conversation written as JSON (kvscope --messages FILE): the list of {"role", "content"} objects that
// transformers' apply_chat_template takes, without tool calling.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/model/chat_template.h"

namespace kvscope::model {

// Throws UsageError naming the file and the message: unreadable file, invalid JSON, anything but a non-empty
// list of objects, a role that is not a string or not system/user/assistant (tool roles named as unsupported),
// content that is not a string (content parts are not supported), and any other field ("tool_calls",
// "reasoning_content", ...), which kvscope would otherwise ignore silently.
std::vector<ChatMessage> read_chat_messages(const std::filesystem::path& file);
std::vector<ChatMessage> parse_chat_messages(const nlohmann::json& json, const std::string& origin);

}  // namespace kvscope::model
