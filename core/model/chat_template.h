#pragma once
// Chat formatting for instruct models (ChatML for SmolLM2).
#include <string>
#include <vector>

namespace kvscope::model {

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

// Formats messages with the ChatML template SmolLM2 ships (including its default system prompt when the
// first message is not a system message) and appends the assistant header when add_generation_prompt.
std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true);

}  // namespace kvscope::model
