// apply_chatml against jinja2 renderings of the template stored in SmolLM2's GGUF (in the fixture).
#include "core/model/chat_template.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace kvscope::model;

TEST_CASE("apply_chatml renders SmolLM2's template as jinja2 does", "[tokenizer][chat]") {
  std::ifstream in(KVSCOPE_FIXTURES_DIR "/tokenizer_smollm2.json");
  REQUIRE(in.good());
  const auto chats = nlohmann::json::parse(in).at("chat");
  REQUIRE(chats.size() >= 3);
  for (const auto& c : chats) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages")) messages.push_back({m.at("role"), m.at("content")});
    CHECK(apply_chatml(messages, c.at("add_generation_prompt").get<bool>()) == c.at("text").get<std::string>());
  }
}

TEST_CASE("apply_chatml edge cases", "[tokenizer][chat]") {
  // No messages: the template's loop never runs, so no default system prompt either.
  CHECK(apply_chatml({}, true) == "<|im_start|>assistant\n");
  CHECK(apply_chatml({}, false).empty());
  CHECK(apply_chatml({{"system", "S"}}, false) == "<|im_start|>system\nS<|im_end|>\n");
  CHECK(apply_chatml({{"user", "hi"}}, false) ==
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n");
}
