// --messages FILE: a conversation as a JSON list of {"role", "content"}, and the errors for everything else.
#include "core/model/chat_messages_file.h"

#include <catch2/catch.hpp>
#include <fstream>

#include "core/common/error.h"
#include "tests/support/temp_file.h"

using namespace kvscope;

namespace {

std::string refusal(const std::string& json_text) {
  try {
    model::parse_chat_messages(nlohmann::json::parse(json_text), "conv.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("a conversation file is read in order", "[tokenizer][chat]") {
  const auto path = test::temp_file("conversation", ".json");
  std::ofstream(path) << R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "caf\u00e9?"},
                             {"content": "yes", "role": "assistant"}])";
  const auto messages = model::read_chat_messages(path);
  REQUIRE(messages.size() == 3);
  CHECK(messages[0].role == "system");
  CHECK(messages[1].content == "café?");
  CHECK(messages[2].role == "assistant");
  CHECK(messages[2].content == "yes");
}

TEST_CASE("a bad conversation file is refused naming the file, the message and what was expected",
          "[tokenizer][chat]") {
  CHECK_THAT(refusal("[]"), Catch::Contains("conv.json: the conversation is empty"));
  CHECK_THAT(refusal(R"({"role": "user", "content": "a"})"), Catch::Contains("top level is a JSON object"));
  CHECK_THAT(refusal(R"({"messages": [], "tools": []})"), Catch::Contains("tools list: tool calling is not supported"));
  CHECK_THAT(refusal(R"(["hi"])"), Catch::Contains("message 0 is a JSON string"));
  CHECK_THAT(refusal(R"([{"content": "a"}])"), Catch::Contains("message 0: field 'role' is missing"));
  CHECK_THAT(refusal(R"([{"role": "user"}])"), Catch::Contains("field 'content' is missing or not a string"));
  CHECK_THAT(refusal(R"([{"role": "user", "content": [{"type": "text", "text": "a"}]}])"),
             Catch::Contains("content parts are not supported"));
  CHECK_THAT(refusal(R"([{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}])"),
             Catch::Contains("conv.json: message 1 has role 'bot' (expected system, user or assistant)"));
  CHECK_THAT(refusal(R"([{"role": "user", "content": "a"}, {"role": "tool", "content": "42"}])"),
             Catch::Contains("message 1 has role 'tool': tool calling is not supported"));
  CHECK_THAT(refusal(R"([{"role": "assistant", "content": "", "tool_calls": []}])"),
             Catch::Contains("message 0 has tool_calls: tool calling is not supported"));
  CHECK_THAT(refusal(R"([{"role": "assistant", "content": "a", "reasoning_content": "r"}])"),
             Catch::Contains("field 'reasoning_content' is not supported"));

  const auto path = test::temp_file("conversation_bad", ".json");
  std::ofstream(path) << "[{\"role\": \"user\", ";
  CHECK_THROWS_WITH(model::read_chat_messages(path), Catch::Contains(path.string() + ": not valid JSON"));
  CHECK_THROWS_WITH(model::read_chat_messages(path.string() + ".missing"),
                    Catch::Contains("cannot read messages file"));
}
