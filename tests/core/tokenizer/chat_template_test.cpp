// apply_chatml against jinja2 renderings of the template stored in SmolLM2's GGUF (in the fixture), and the
// recognition of chat templates by their markers. Each family's rendering against transformers is in
// tests/e2e/hf_synthetic_test.cpp.
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

TEST_CASE("chat templates are recognised by their markers", "[tokenizer][chat]") {
  CHECK(recognise_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}") == ChatFormat::ChatML);
  CHECK(recognise_chat_template("{{ '<|start_header_id|>' + m['role'] }}") == ChatFormat::Llama3);
  CHECK(recognise_chat_template("[INST] {{ '<<SYS>>\\n' }}") == ChatFormat::Llama2);
  CHECK(recognise_chat_template("{{ '[INST] ' + content + ' [/INST]' }}") == ChatFormat::Mistral);
  // Llama 3.1's dated system block makes it a format of its own, Qwen3's enable_thinking another.
  CHECK(recognise_chat_template("<|start_header_id|>system\nCutting Knowledge Date: December 2023") ==
        ChatFormat::Llama31);
  CHECK(recognise_chat_template("<|im_start|>assistant\n{% if enable_thinking is false %}<think>\n\n</think>") ==
        ChatFormat::Qwen3);
  // ChatML with reasoning rules other than Qwen3's switch (Qwen3-2507 Thinking, QwQ) is not taken for either.
  CHECK_FALSE(recognise_chat_template("<|im_start|>assistant\n<think>\n"));
  CHECK_FALSE(recognise_chat_template("{{ '<start_of_turn>user\\n' }}"));  // Gemma
}

TEST_CASE("a Llama 3.1 template's default date is its literal or today's", "[tokenizer][chat]") {
  auto literal = llama31_date_default("{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}");
  REQUIRE(literal);
  CHECK(literal->date == "26 Jul 2024");
  CHECK_FALSE(literal->date_is_today);
  literal = llama31_date_default("{% set date_string = '01 Jan 2025' %}");
  REQUIRE(literal);
  CHECK(literal->date == "01 Jan 2025");
  // Llama 3.2's calls strftime_now first and keeps the literal for environments without it.
  const auto today = llama31_date_default(
      "{%- if strftime_now is defined %}{%- set date_string = strftime_now(\"%d %b %Y\") %}{%- else %}"
      "{%- set date_string = \"26 Jul 2024\" %}");
  REQUIRE(today);
  CHECK(today->date_is_today);
  CHECK_FALSE(llama31_date_default("Today Date: {{ date_string }}"));
}

TEST_CASE("settings a family has no use for, and tool roles, are refused", "[tokenizer][chat]") {
  ChatTemplate chatml;
  ChatSettings dated;
  dated.date = "26 Jul 2024";
  CHECK_THROWS_WITH(render_chat(chatml, {{"user", "a"}}, true, dated),
                    Catch::Contains("--chat-date") && Catch::Contains("chatml") && Catch::Contains("writes no date"));
  ChatSettings no_think;
  no_think.enable_thinking = false;
  ChatTemplate llama31;
  llama31.format = ChatFormat::Llama31;
  llama31.date_default.date = "26 Jul 2024";
  CHECK_THROWS_WITH(render_chat(llama31, {{"user", "a"}}, true, no_think),
                    Catch::Contains("--no-think") && Catch::Contains("llama3.1"));
  dated.date = "26 July 2024";
  CHECK_THROWS_WITH(render_chat(llama31, {{"user", "a"}}, true, dated), Catch::Contains("DD Mon YYYY"));
  CHECK_THROWS_WITH(render_chat(llama31, {}), Catch::Contains("empty"));
  for (const char* role : {"tool", "ipython"})
    CHECK_THROWS_WITH(render_chat(chatml, {{"user", "a"}, {role, "42"}}),
                      Catch::Contains(std::string("message 1 has role '") + role) &&
                          Catch::Contains("tool calling is not supported"));
  CHECK_THROWS_WITH(render_chat(chatml, {{"narrator", "a"}}),
                    Catch::Contains("role 'narrator'") && Catch::Contains("expected system, user or assistant"));
}

TEST_CASE("a ChatML template's default system prompt is the literal it writes", "[tokenizer][chat]") {
  // SmolLM2's (from its GGUF) and Qwen2.5's spelling, with Jinja's \n escape; Qwen2.5 first writes a system
  // header followed by Jinja code, which is not a literal prompt.
  CHECK(chatml_default_system("{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by "
                              "Hugging Face<|im_end|>\\n' }}") ==
        "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  CHECK(chatml_default_system("{{- '<|im_start|>system\\n' }}{{- messages[0]['content'] }}<|im_end|>{{- "
                              "'<|im_start|>system\\nYou are Qwen.\\nBe brief.<|im_end|>\\n' }}") ==
        "You are Qwen.\nBe brief.");
  CHECK(chatml_default_system("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>").empty());
}

TEST_CASE("Llama 2 and Mistral refuse conversations whose roles do not alternate", "[tokenizer][chat]") {
  for (const ChatFormat format : {ChatFormat::Llama2, ChatFormat::Mistral}) {
    ChatTemplate t;
    t.format = format;
    t.bos = "<s>";
    t.eos = "</s>";
    INFO(chat_format_name(format));
    CHECK_THROWS_WITH(render_chat(t, {{"user", "a"}, {"user", "b"}}),
                      Catch::Contains("message 1 has role 'user'") && Catch::Contains("alternating"));
    CHECK_THROWS_WITH(render_chat(t, {{"user", "a"}, {"system", "b"}}), Catch::Contains("role 'system'"));
    CHECK_NOTHROW(render_chat(t, {{"system", "s"}, {"user", "a"}, {"assistant", "b"}, {"user", "c"}}));
  }
}

TEST_CASE("a model whose template kvscope does not render refuses --chat with the reason", "[tokenizer][chat]") {
  ChatTemplateChoice none;
  none.description = "the chat template in chat_template.jinja is not one kvscope renders";
  CHECK_THROWS_WITH(none.get(), Catch::Contains("--chat: the chat template in chat_template.jinja"));
}
