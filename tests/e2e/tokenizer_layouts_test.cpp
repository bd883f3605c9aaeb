// Hugging Face tokenizer folders in the layouts of released models (Llama 2, Phi-3, Qwen2, Llama 3.1, a Llama 3
// GGUF re-saved by transformers 5): kvscope's prompts, plain encodes, --no-parse-special encodes and decodes
// against the ids transformers itself gives (tools/make_tokenizer_layout_goldens.py,
// tests/fixtures/hf_tokenizer_layouts/). Where the bare `tokenizers` library differs from transformers (the
// golden's raw_ids), kvscope must side with transformers.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/model/tokenizer_transformers.h"
#include "tests/core/model/test_support.h"
#include "tests/support/golden_compare.h"

using namespace kvscope;
using Catch::Matchers::Contains;

namespace {
const std::filesystem::path kDir = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_tokenizer_layouts";

void write_text(const std::filesystem::path& path, const std::string& text) { std::ofstream(path) << text; }
}  // namespace

TEST_CASE("tokenizer folders of released layouts tokenize as transformers does", "[tokenizer][hf]") {
  const nlohmann::json golden = test::read_json_fixture(kDir / "golden.json");
  REQUIRE(golden["layouts"].size() == 5);
  int transformers_differs_from_bare = 0;
  for (const auto& [name, layout] : golden["layouts"].items()) {
    INFO("layout " << name);
    const model::LoadedTokenizer loaded = model::load_transformers_tokenizer(kDir / name);
    const model::Tokenizer& tok = *loaded.tokenizer;
    CHECK_THAT(loaded.description, Contains(layout["class"].get<std::string>()));
    CHECK(tok.vocab_size() == layout["len"].get<int>());
    CHECK(tok.bos_id() == layout["bos_id"].get<int>());
    CHECK(tok.eos_id() == layout["eos_id"].get<int>());
    if (layout["generation_eos"].is_array())
      for (const auto& id : layout["generation_eos"]) CHECK(tok.is_end_of_generation(id.get<int>()));
    for (const auto& c : layout["cases"]) {
      const std::string text = c["text"].get<std::string>();
      INFO("text \"" << text << "\"");
      const auto prompt_ids = c["prompt_ids"].get<std::vector<int>>();
      CHECK(tok.encode_prompt(text, true) == prompt_ids);
      CHECK(tok.encode(text, true) == c["plain_ids"].get<std::vector<int>>());
      CHECK(tok.encode_prompt(text, false) == c["split_ids"].get<std::vector<int>>());
      CHECK(tok.decode(prompt_ids) == c["decoded"].get<std::string>());
      if (c["raw_ids"] != c["prompt_ids"]) ++transformers_differs_from_bare;
    }
  }
  // The fixture keeps cases where a tokenizer.json read on its own gives other ids than transformers.
  CHECK(transformers_differs_from_bare > 0);
}

TEST_CASE("a token's piece keeps the space it carries inside a text", "[tokenizer][hf]") {
  const model::LoadedTokenizer loaded = model::load_transformers_tokenizer(kDir / "llama2");
  const model::Tokenizer& tok = *loaded.tokenizer;
  // Decoded alone, the Metaspace decoder strips a text's first space; a piece shown beside others keeps it.
  const auto ids = tok.encode(" world", true);
  REQUIRE_FALSE(ids.empty());
  std::string joined;
  for (int id : ids) joined += tok.token_text(id);
  CHECK(joined == tok.decode(tok.encode("a world", true)).substr(1));
  CHECK(tok.token_text(tok.bos_id()) == "<s>");
}

TEST_CASE("a damaged or missing tokenizer is an error naming the file and the reason", "[tokenizer][hf]") {
  test::TempDir dir;
  SECTION("no tokenizer files") {
    const std::string message = test::error_message([&] { model::load_transformers_tokenizer(dir.path()); });
    CHECK_THAT(message, Contains((dir.path() / "tokenizer.json").string() + ": missing"));
  }
  SECTION("a tokenizer.json cut short") {
    const std::string text = test::read_json_fixture(kDir / "qwen2" / "tokenizer.json").dump();
    write_text(dir.path() / "tokenizer.json", text.substr(0, text.size() / 2));
    write_text(dir.path() / "tokenizer_config.json", "{}");
    const std::string message = test::error_message([&] { model::load_transformers_tokenizer(dir.path()); });
    CHECK_THAT(message, Contains((dir.path() / "tokenizer.json").string() + ": not valid JSON"));
  }
  SECTION("a tokenizer.json that is JSON but not a tokenizer") {
    write_text(dir.path() / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": 3}}");
    write_text(dir.path() / "tokenizer_config.json", "{}");
    const std::string message = test::error_message([&] { model::load_transformers_tokenizer(dir.path()); });
    CHECK_THAT(message, Contains(dir.path().string()) && Contains("transformers could not load"));
  }
  SECTION("an unknown component type") {
    auto json = test::read_json_fixture(kDir / "qwen2" / "tokenizer.json");
    json["normalizer"] = {{"type", "Bogus"}};
    write_text(dir.path() / "tokenizer.json", json.dump());
    write_text(dir.path() / "tokenizer_config.json", "{}");
    const std::string message = test::error_message([&] { model::load_transformers_tokenizer(dir.path()); });
    CHECK_THAT(message, Contains("transformers could not load") && Contains("field 'normalizer'") &&
                            Contains("Bogus"));
  }
}
