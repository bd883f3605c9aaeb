// SentencePiece-style tokenizer.json files (Llama 2, Mistral) loaded as transformers loads them: encode and
// decode against Hugging Face `tokenizers` on hard strings, for the legacy Prepend/Replace normalizer,
// Metaspace first/always/never with and without split, and without byte fallback
// (tools/make_metaspace_tokenizers.py, tests/fixtures/hf_metaspace/; no tokenizer_config.json, so transformers
// keeps the file's pipeline as it is).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/model/tokenizer_transformers.h"
#include "tests/core/model/test_support.h"
#include "tests/support/golden_compare.h"

using namespace kvscope;

namespace {

const std::filesystem::path kDir = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_metaspace";

const nlohmann::json& base_tokenizer() {
  static const nlohmann::json json = test::read_json_fixture(kDir / "tokenizer.json");
  return json;
}

// The base file with a variant's fields replaced, as the generator's apply_fields does.
nlohmann::json with_fields(const nlohmann::json& fields) {
  nlohmann::json out = base_tokenizer();
  for (const auto& [key, value] : fields.items()) {
    if (key.starts_with("model.")) {
      out["model"][key.substr(6)] = value;
    } else {
      out[key] = value;
    }
  }
  return out;
}

model::LoadedTokenizer load(const test::TempDir& dir, const nlohmann::json& tokenizer) {
  std::ofstream(dir.path() / "tokenizer.json") << tokenizer.dump();
  return model::load_transformers_tokenizer(dir.path());
}

}  // namespace

TEST_CASE("SentencePiece-style tokenizer.json variants encode and decode as tokenizers does",
          "[tokenizer][metaspace]") {
  const nlohmann::json golden = test::read_json_fixture(kDir / "golden.json");
  REQUIRE(golden["variants"].size() == 5);
  for (const auto& [name, variant] : golden["variants"].items()) {
    INFO("variant " << name);
    test::TempDir dir;
    const auto loaded = load(dir, with_fields(variant["fields"]));
    const model::Tokenizer& tok = *loaded.tokenizer;
    for (const auto& entry : variant["strings"]) {
      const std::string text = entry["text"].get<std::string>();
      INFO("text \"" << text << "\"");
      CHECK(tok.encode(text, true) == entry["ids"].get<std::vector<int>>());
      CHECK(tok.decode(entry["ids"].get<std::vector<int>>()) == entry["decoded"].get<std::string>());
    }
    for (const auto& entry : variant["decode_only"]) {
      INFO("ids " << entry["ids"].dump());
      CHECK(tok.decode(entry["ids"].get<std::vector<int>>()) == entry["decoded"].get<std::string>());
    }
  }
}

TEST_CASE("the Llama 2 layout adds BOS through its post-processor", "[tokenizer][metaspace]") {
  const nlohmann::json golden = test::read_json_fixture(kDir / "golden.json");
  test::TempDir dir;
  const auto loaded = load(dir, base_tokenizer());
  const model::Tokenizer& tok = *loaded.tokenizer;
  CHECK(tok.add_bos());
  CHECK(tok.encode_prompt("Hello", true) == golden["bos_with_special_tokens"].get<std::vector<int>>());
  CHECK(tok.vocab_size() == 1500);
  // Without parse_special, "<s>" is text: '<' 's' '>' pieces, not BOS.
  CHECK(tok.encode("<s>", false) != std::vector<int>{1});
  CHECK(tok.encode("<s>", true) == std::vector<int>{1});
}
