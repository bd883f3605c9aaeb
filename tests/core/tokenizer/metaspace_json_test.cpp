// SentencePiece-style tokenizer.json files (Llama 2, Mistral): kvscope's encode and decode against Hugging Face
// `tokenizers` on hard strings, for the legacy Prepend/Replace normalizer, Metaspace first/always/never with and
// without split, and without byte fallback (tools/make_metaspace_tokenizers.py, tests/fixtures/hf_metaspace/).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/model/tokenizer_json.h"
#include "tests/core/model/test_support.h"
#include "tests/support/golden_compare.h"

using namespace kvscope;
using Catch::Matchers::Contains;

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
  return model::load_tokenizer_json(dir.path());
}

std::string load_error(const nlohmann::json& tokenizer) {
  test::TempDir dir;
  return test::error_message([&] { load(dir, tokenizer); });
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
    CHECK_THAT(loaded.description, Contains("SentencePiece-style BPE"));
    const model::Tokenizer& tok = *loaded.tokenizer;
    for (const auto& entry : variant["strings"]) {
      const std::string text = entry["text"].get<std::string>();
      INFO("text \"" << text << "\"");
      const auto ids = tok.encode(text, true);
      CHECK(ids == entry["ids"].get<std::vector<int>>());
      CHECK(tok.decode(entry["ids"].get<std::vector<int>>()) == entry["decoded"].get<std::string>());
    }
    for (const auto& entry : variant["decode_only"]) {
      INFO("ids " << entry["ids"].dump());
      CHECK(tok.decode(entry["ids"].get<std::vector<int>>()) == entry["decoded"].get<std::string>());
    }
  }
}

TEST_CASE("the Llama 2 layout adds BOS through its post-processor and knows its special tokens",
          "[tokenizer][metaspace]") {
  const nlohmann::json golden = test::read_json_fixture(kDir / "golden.json");
  test::TempDir dir;
  const auto loaded = load(dir, base_tokenizer());
  const model::Tokenizer& tok = *loaded.tokenizer;
  CHECK(loaded.description == "tokenizer.json SentencePiece-style BPE (Prepend/Replace normalizer, byte fallback)");
  REQUIRE(tok.add_bos());
  std::vector<int> ids = {tok.bos_id()};
  const auto body = tok.encode("Hello", true);
  ids.insert(ids.end(), body.begin(), body.end());
  CHECK(ids == golden["bos_with_special_tokens"].get<std::vector<int>>());
  CHECK(tok.vocab_size() == 1500);
  // Without parse_special, "<s>" is text: '<' 's' '>' pieces, not BOS.
  CHECK(tok.encode("<s>", false) != std::vector<int>{1});
}

TEST_CASE("SentencePiece-style tokenizer.json features kvscope lacks are clear errors", "[tokenizer][metaspace]") {
  const nlohmann::json& base = base_tokenizer();
  SECTION("a normalizer other than Prepend/Replace") {
    nlohmann::json t = base;
    t["normalizer"] = {{"type", "NFKC"}};
    CHECK_THAT(load_error(t), Contains("field 'normalizer'") && Contains("NFKC"));
  }
  SECTION("neither a Replace normalizer nor a Metaspace pre-tokenizer") {
    nlohmann::json t = base;
    t["normalizer"] = nullptr;
    CHECK_THAT(load_error(t), Contains("field 'pre_tokenizer'") && Contains("expected Metaspace"));
  }
  SECTION("an unknown prepend_scheme") {
    nlohmann::json t = base;
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "sometimes"}};
    CHECK_THAT(load_error(t), Contains("field 'pre_tokenizer.prepend_scheme'") && Contains("sometimes"));
  }
  SECTION("a decoder that is neither byte-level nor SentencePiece-style") {
    nlohmann::json t = base;
    t["decoder"]["decoders"].erase(1);  // no ByteFallback
    CHECK_THAT(load_error(t), Contains("field 'decoder'") && Contains("ByteFallback"));
  }
  SECTION("BPE dropout") {
    nlohmann::json t = base;
    t["model"]["dropout"] = 0.1;
    CHECK_THAT(load_error(t), Contains("field 'model.dropout'"));
  }
  SECTION("an added token that strips spaces") {
    nlohmann::json t = base;
    t["added_tokens"][1]["lstrip"] = true;
    CHECK_THAT(load_error(t), Contains("field 'added_tokens'") && Contains("lstrip true is not supported"));
  }
  SECTION("an unk_token missing from the vocabulary") {
    nlohmann::json t = base;
    t["model"]["unk_token"] = "<unknown>";
    CHECK_THAT(load_error(t), Contains("field 'model.unk_token'") && Contains("<unknown>"));
  }
}
