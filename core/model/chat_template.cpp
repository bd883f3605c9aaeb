#include "core/model/chat_template.h"

namespace kvscope::model {

// Mirrors the Jinja template in SmolLM2's tokenizer.chat_template; content is written verbatim (the
// template does not trim), and tests/fixtures/tokenizer_smollm2.json holds a jinja2 rendering to compare.
std::string apply_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  if (!messages.empty() && messages.front().role != "system")
    out += "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";
  for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace kvscope::model
