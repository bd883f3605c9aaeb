// Chat templates rendered by Jinja2 in the embedded interpreter: SmolLM2's GGUF template against jinja2
// renderings in the fixture, the environment transformers gives templates (raise_exception, tojson,
// strftime_now, loop controls, {% generation %}, trim_blocks / lstrip_blocks), and the errors: a template
// that raises or does not parse, a setting the template never reads, tool roles, a model without a template.
// Each family against transformers' apply_chat_template is in tests/e2e/chat_template_golden_test.cpp and
// tests/e2e/hf_synthetic_test.cpp.
#include "core/model/chat_template.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/model/chat_date.h"
#include "core/model/gguf.h"
#include "core/model/model.h"

using namespace kvscope;
using namespace kvscope::model;

namespace {
ChatTemplate jinja(const std::string& source) {
  ChatTemplate t;
  t.jinja = source;
  t.origin = "test.jinja";
  t.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  return t;
}
}  // namespace

TEST_CASE("SmolLM2's GGUF template renders as jinja2 renders it", "[tokenizer][chat]") {
  std::ifstream in(KVSCOPE_FIXTURES_DIR "/tokenizer_smollm2.json");
  REQUIRE(in.good());
  const auto chats = nlohmann::json::parse(in).at("chat");
  REQUIRE(chats.size() >= 3);
  const Model model = load_model(default_model_path());
  const ChatTemplate& t = model.chat_template.get();
  for (const auto& c : chats) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages")) messages.push_back({m.at("role"), m.at("content")});
    CHECK(render_chat(t, messages, c.at("add_generation_prompt").get<bool>()) == c.at("text").get<std::string>());
  }
  // No messages: the template's loop never runs, so no default system prompt either.
  CHECK(render_chat(t, {}, true) == "<|im_start|>assistant\n");
  CHECK(render_chat(t, {}, false).empty());
}

TEST_CASE("templates see the environment transformers gives them", "[tokenizer][chat]") {
  const std::vector<ChatMessage> two = {{"user", "a\"b"}, {"assistant", "c"}};
  // trim_blocks and lstrip_blocks: a block tag's own line leaves no newline or indentation behind.
  CHECK(render_chat(jinja("{% for m in messages %}\n  {% if m.role == 'user' %}\n[{{ m.content }}]\n  {% endif %}\n{% endfor %}"),
                    two, false) == "[a\"b]\n");
  // tojson keeps non-ASCII text as it is (ensure_ascii=False) and takes json.dumps' keywords.
  CHECK(render_chat(jinja("{{ messages[0] | tojson }}|{{ {'k': 'é'} | tojson(indent=1) }}"), two, false) ==
        "{\"role\": \"user\", \"content\": \"a\\\"b\"}|{\n \"k\": \"é\"\n}");
  // Loop controls, the generation block, special tokens and add_generation_prompt.
  CHECK(render_chat(jinja("{{ bos_token }}{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}"
                          "{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
                          "{% if add_generation_prompt %}{{ eos_token }}{% endif %}"),
                    two, true) == "<s>c</s>");
  // strftime_now reads the clock, as Llama 3.2's template expects.
  CHECK(render_chat(jinja("{{ strftime_now('%d %b %Y') }}"), {}, false) == today_chat_date());
  // The sandbox refuses what a template must not do.
  CHECK_THROWS_WITH(render_chat(jinja("{{ messages.__class__.__mro__ }}"), two),
                    Catch::Contains("chat template in test.jinja"));
}

TEST_CASE("a template's own refusal and a template that does not parse are errors naming it", "[tokenizer][chat]") {
  const auto alternate = jinja(
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
      "{{ m.content }}{% endfor %}");
  CHECK_THROWS_WITH(render_chat(alternate, {{"user", "a"}, {"user", "b"}}),
                    Catch::Contains("the chat template in test.jinja refused the conversation: Conversation roles "
                                    "must alternate"));
  CHECK_NOTHROW(render_chat(alternate, {{"user", "a"}, {"assistant", "b"}}));
  CHECK_THROWS_WITH(render_chat(jinja("line one\n{% for m in messages %}{{ m.content }\n"), {{"user", "a"}}),
                    Catch::Contains("does not parse (line 2)"));
}

TEST_CASE("settings the template never reads, and tool roles, are refused", "[tokenizer][chat]") {
  const auto plain = jinja("{% for m in messages %}{{ m.content }}{% endfor %}");
  const auto dated = jinja("{% if not date_string is defined %}{% set date_string = '26 Jul 2024' %}{% endif %}"
                           "{{ date_string }}{% if enable_thinking is false %}!{% endif %}{{ mode }}");
  ChatSettings date;
  date.date = "05 Mar 2025";
  CHECK_THROWS_WITH(render_chat(plain, {{"user", "a"}}, true, date),
                    Catch::Contains("--chat-date") && Catch::Contains("does not read 'date_string'"));
  CHECK(render_chat(dated, {}, true, date) == "05 Mar 2025");
  CHECK(render_chat(dated, {}, true) == "26 Jul 2024");
  ChatSettings no_think;
  no_think.enable_thinking = false;
  CHECK_THROWS_WITH(render_chat(plain, {{"user", "a"}}, true, no_think), Catch::Contains("--no-think"));
  CHECK(render_chat(dated, {}, true, no_think) == "26 Jul 2024!");
  ChatSettings args;
  args.variables = {{"mode", "\"fast\""}};
  CHECK(render_chat(dated, {}, true, args) == "26 Jul 2024fast");
  args.variables = {{"mode", "plain text"}};
  CHECK(render_chat(dated, {}, true, args) == "26 Jul 2024plain text");
  args.variables = {{"other", "1"}};
  CHECK_THROWS_WITH(render_chat(dated, {}, true, args),
                    Catch::Contains("--template-arg other") && Catch::Contains("it reads: date_string, enable_thinking, mode"));
  date.date = "5 March 2025";
  CHECK_THROWS_WITH(render_chat(dated, {}, true, date), Catch::Contains("DD Mon YYYY"));
  for (const char* role : {"tool", "ipython"})
    CHECK_THROWS_WITH(render_chat(plain, {{"user", "a"}, {role, "42"}}),
                      Catch::Contains(std::string("message 1 has role '") + role) &&
                          Catch::Contains("tool calling is not supported"));
  CHECK_THROWS_WITH(render_chat(plain, {{"narrator", "a"}}),
                    Catch::Contains("role 'narrator'") && Catch::Contains("expected system, user or assistant"));
  CHECK(chat_template_variables(dated) == std::vector<std::string>{"date_string", "enable_thinking", "mode"});
}

TEST_CASE("a model without a chat template refuses --chat, as transformers does", "[tokenizer][chat]") {
  const Model model = load_model(default_model_path());
  const ChatTemplateChoice none = choose_chat_template({std::nullopt, ""}, *model.tokenizer);
  CHECK_THROWS_WITH(none.get(), Catch::Contains("--chat: the model has no chat template") &&
                                    Catch::Contains("--chat-template FILE"));
  const ChatTemplateChoice own = choose_chat_template({"{{ bos_token }}x", "mine.jinja"}, *model.tokenizer);
  CHECK(own.description == "Jinja2 template in mine.jinja");
  CHECK(render_chat(own.get(), {}) == model.tokenizer->token_text(model.tokenizer->bos_id()) + "x");
}
