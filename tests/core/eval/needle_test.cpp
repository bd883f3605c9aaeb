// The needle generator on the default model's tokenizer: deterministic under a seed, within its token
// budget, the needle where the depth says; and the exact-match checker on crafted answers.
#include <catch2/catch.hpp>

#include "core/common/error.h"
#include "core/eval/needle.h"
#include "tests/support/default_model.h"

using namespace kvscope;

TEST_CASE("needle answers match only the exact value as the first number") {
  CHECK(eval::needle_answer_matches(" 4821.", "4821"));
  CHECK(eval::needle_answer_matches("The number is 4821, I think", "4821"));
  CHECK_FALSE(eval::needle_answer_matches(" 48210.", "4821"));        // longer number
  CHECK_FALSE(eval::needle_answer_matches(" 482", "4821"));           // cut short
  CHECK_FALSE(eval::needle_answer_matches(" 4 821", "4821"));         // split
  CHECK_FALSE(eval::needle_answer_matches(" 17 then 4821", "4821"));  // not the first number
  CHECK_FALSE(eval::needle_answer_matches(" I do not know.", "4821"));
  CHECK_FALSE(eval::needle_answer_matches("", "4821"));
}

TEST_CASE("needle cases are deterministic, sized, and place the needle at the depth", "[model]") {
  const auto* model = test::default_model();
  const auto source = eval::load_needle_source(eval::default_needle_dir());
  REQUIRE(source.sentences.size() > 100);
  const auto a = eval::make_needle_case(source, *model->tokenizer, 600, 0.5, 7);
  const auto b = eval::make_needle_case(source, *model->tokenizer, 600, 0.5, 7);
  const auto c = eval::make_needle_case(source, *model->tokenizer, 600, 0.5, 8);
  CHECK(a.prompt == b.prompt);
  CHECK(a.value == b.value);
  CHECK(a.prompt != c.prompt);
  CHECK(a.value.size() == 7);
  CHECK(a.context_tokens == static_cast<int>(model->tokenizer->encode(a.prompt, false).size()));
  CHECK(a.context_tokens <= 600);
  CHECK(a.context_tokens >= 540);
  const std::string needle = "The special magic number for " + a.key + " is " + a.value + ".";
  REQUIRE(a.prompt.find(needle) != std::string::npos);
  CHECK(a.actual_depth == Approx(0.5).margin(0.1));

  const auto top = eval::make_needle_case(source, *model->tokenizer, 600, 0.0, 7);
  CHECK(top.prompt.rfind("The special magic number for " + top.key, 0) == 0);
  const auto bottom = eval::make_needle_case(source, *model->tokenizer, 600, 1.0, 7);
  const std::string bottom_needle =
      "The special magic number for " + bottom.key + " is " + bottom.value + ".\n\nQuestion:";
  CHECK(bottom.prompt.find(bottom_needle) != std::string::npos);
  // The question asks for the needle's key, and the prompt ends where the answer starts.
  CHECK(bottom.prompt.substr(bottom.prompt.size() - 3) == " is");

  CHECK_THROWS_AS(eval::make_needle_case(source, *model->tokenizer, 600, 1.5, 7), UsageError);
  CHECK_THROWS_AS(eval::make_needle_case(source, *model->tokenizer, 20, 0.5, 7), UsageError);
}
