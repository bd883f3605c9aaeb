// Loading Hugging Face folders: a tiny Llama folder loads and runs; each kind of bad folder is a clear error
// naming the file and the field or tensor.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>

#include "core/engine/engine.h"
#include "core/model/model.h"
#include "tests/core/model/safetensors_builder.h"
#include "tests/core/model/test_support.h"

namespace t = kvscope::test;
namespace model = kvscope::model;
using Catch::Contains;

namespace {

std::string load_error(const std::filesystem::path& dir) {
  return t::error_message([&] { model::load_model(dir); });
}

}  // namespace

TEST_CASE("a tiny Hugging Face Llama folder loads and runs", "[hf]") {
  t::TempDir dir;
  const t::TinyHfLlama tiny;
  tiny.write(dir.path());
  const model::Model m = model::load_model(dir.path());
  CHECK(m.format() == model::ModelFormat::HuggingFace);
  CHECK(m.path() == dir.path());
  CHECK(m.config.n_kv_heads == 2);
  CHECK(m.config.head_dim == 4);
  CHECK(m.config.rope_style == model::RopeStyle::HalfSplit);
  CHECK(m.weights.output.data == m.weights.token_embedding.data);
  CHECK(m.tokenizer->encode("ab a c<|im_end|>", true) == std::vector<int>{4, 5, 3, 2, 7});
  CHECK(m.tokenizer->is_end_of_generation(7));
  CHECK(m.sha256().size() == 64);
  kvscope::engine::Engine engine(m);
  const auto logits = engine.prompt_logits({0, 1, 2, 4});
  REQUIRE(logits.size() == 8);
  for (float v : logits) CHECK(std::isfinite(v));
}

TEST_CASE("sharded Hugging Face folders follow the index", "[hf]") {
  t::TempDir dir;
  const t::TinyHfLlama tiny;
  tiny.write(dir.path());
  auto tensors = tiny.tensors();
  std::filesystem::remove(dir.path() / "model.safetensors");
  const std::vector<t::SafetensorsEntry> first(tensors.begin(), tensors.begin() + 5),
      second(tensors.begin() + 5, tensors.end());
  t::write_bytes(dir.path() / "model-00001-of-00002.safetensors", t::safetensors_image(first));
  t::write_bytes(dir.path() / "model-00002-of-00002.safetensors", t::safetensors_image(second));
  nlohmann::json map;
  for (const auto& e : first) map[e.name] = "model-00001-of-00002.safetensors";
  for (const auto& e : second) map[e.name] = "model-00002-of-00002.safetensors";
  t::write_json(dir.path() / "model.safetensors.index.json", {{"metadata", {{"total_size", 0}}}, {"weight_map", map}});
  CHECK(model::load_model(dir.path()).hf_folder()->shards().size() == 2);

  SECTION("a shard the index names is missing") {
    std::filesystem::remove(dir.path() / "model-00002-of-00002.safetensors");
    CHECK_THAT(load_error(dir.path()), Contains("model-00002-of-00002.safetensors") && Contains("cannot open"));
  }
  SECTION("the index places a tensor in a shard without it") {
    map["model.norm.weight"] = "model-00001-of-00002.safetensors";
    t::write_json(dir.path() / "model.safetensors.index.json", {{"weight_map", map}});
    CHECK_THAT(load_error(dir.path()), Contains("model.safetensors.index.json") && Contains("'model.norm.weight'") &&
                                           Contains("does not contain it"));
  }
  SECTION("a shard name that leaves the folder") {
    map["model.norm.weight"] = "../elsewhere.safetensors";
    t::write_json(dir.path() / "model.safetensors.index.json", {{"weight_map", map}});
    CHECK_THAT(load_error(dir.path()), Contains("is not a file name in this folder"));
  }
}

TEST_CASE("bad Hugging Face folders are clear errors", "[hf]") {
  t::TempDir dir;
  t::TinyHfLlama tiny;
  tiny.write(dir.path());
  nlohmann::json config = tiny.config();
  auto rewrite_config = [&] { t::write_json(dir.path() / "config.json", config); };

  SECTION("JSON nested too deep to quote safely (the tokenizer fuzz harness's 76 crashes)") {
    // 100 000 nested arrays: nlohmann's dump recurses per level, so quoting it in an error overflowed the stack.
    for (const char* file : {"tokenizer.json", "config.json"}) {
      std::ofstream(dir.path() / file) << std::string(100000, '[') << std::string(100000, ']');
      CHECK_THAT(load_error(dir.path()), Contains(file) && Contains("JSON nested deeper than 64 levels"));
      tiny.write(dir.path());
    }
  }
  SECTION("no config.json") {
    std::filesystem::remove(dir.path() / "config.json");
    CHECK_THAT(load_error(dir.path()), Contains(dir.path().string()) && Contains("no config.json"));
  }
  SECTION("no weights") {
    std::filesystem::remove(dir.path() / "model.safetensors");
    CHECK_THAT(load_error(dir.path()), Contains("no model.safetensors or model.safetensors.index.json"));
  }
  SECTION("unknown architecture") {
    config["architectures"] = {"GPTNeoXForCausalLM"};
    rewrite_config();
    CHECK_THAT(load_error(dir.path()),
               Contains("config.json: field 'architectures'") && Contains("\"GPTNeoXForCausalLM\" is not supported"));
  }
  SECTION("a feature the engine lacks") {
    config["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
    rewrite_config();
    CHECK_THAT(load_error(dir.path()), Contains("field 'rope_scaling.rope_type'") && Contains("dynamic"));
  }
  SECTION("a quantized folder is refused by its quantization_config, naming the folder and the method") {
    // The tensors are still the float ones, which would load: the refusal comes from quantization_config alone.
    for (const char* method : {"gptq", "awq", "bitsandbytes", "compressed-tensors", "fp8", "mxfp4"}) {
      config["quantization_config"] = {{"quant_method", method}, {"bits", 4}};
      rewrite_config();
      CHECK_THAT(load_error(dir.path()),
                 Contains((dir.path() / "config.json").string() + ": field 'quantization_config': quant_method \"" +
                          method + "\" is not supported") &&
                     Contains("kvscope reads LlamaForCausalLM folders' weights as F32, F16 or BF16 tensors") &&
                     Contains("\"mxfp4\" only in GptOssForCausalLM's experts"));
    }
    config["quantization_config"] = {{"bits", 4}};
    rewrite_config();
    CHECK_THAT(load_error(dir.path()), Contains("field 'quantization_config.quant_method': missing or not a string"));
    config["quantization_config"] = "gptq";
    rewrite_config();
    CHECK_THAT(load_error(dir.path()), Contains("field 'quantization_config': \"gptq\" (expected an object)"));
  }
  SECTION("YaRN's extrapolation_factor, which transformers ignores, is refused unless 1") {
    config["rope_scaling"] = {{"rope_type", "yarn"},
                              {"factor", 4.0},
                              {"original_max_position_embeddings", 16},
                              {"extrapolation_factor", 0.5}};
    rewrite_config();
    CHECK_THAT(load_error(dir.path()), Contains("field 'rope_scaling.extrapolation_factor': 0.5 is not supported in a "
                                                "folder (expected 1: transformers ignores the field"));
    config["rope_scaling"]["extrapolation_factor"] = 1.0;
    rewrite_config();
    CHECK(model::load_model(dir.path()).config.rope_scaling.type == "yarn");
  }
  SECTION("a hyper-parameter of the wrong type") {
    config["num_hidden_layers"] = "two";
    rewrite_config();
    CHECK_THAT(load_error(dir.path()), Contains("field 'num_hidden_layers'"));
  }
  SECTION("a tensor of the wrong shape") {
    config["intermediate_size"] = 32;
    rewrite_config();
    CHECK_THAT(load_error(dir.path()),
               Contains("model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' shape: [24, 16]") &&
                   Contains("expected [32, 16]"));
  }
  SECTION("a missing tensor") {
    config["tie_word_embeddings"] = false;
    rewrite_config();
    CHECK_THAT(load_error(dir.path()), Contains("tensor 'lm_head.weight' is in none of the safetensors files"));
  }
  SECTION("an unsupported dtype") {
    auto tensors = tiny.tensors();
    tensors[0].dtype = "F64";
    tensors[0].data.resize(tensors[0].data.size() * 2);
    t::write_bytes(dir.path() / "model.safetensors", t::safetensors_image(tensors));
    CHECK_THAT(load_error(dir.path()),
               Contains("model.safetensors: tensor 'model.embed_tokens.weight' field 'dtype'") &&
                   Contains("\"F64\" is not supported"));
  }
  SECTION("a truncated weight file") {
    const auto path = dir.path() / "model.safetensors";
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
    CHECK_THAT(load_error(dir.path()), Contains("model.safetensors") && Contains("truncated"));
  }
  SECTION("no tokenizer.json") {
    std::filesystem::remove(dir.path() / "tokenizer.json");
    CHECK_THAT(load_error(dir.path()), Contains("tokenizer.json: missing"));
  }
  SECTION("a tokenizer component no tokenizers version knows") {
    nlohmann::json tokenizer = tiny.tokenizer();
    tokenizer["normalizer"] = {{"type", "NFKQ"}};
    t::write_json(dir.path() / "tokenizer.json", tokenizer);
    CHECK_THAT(load_error(dir.path()), Contains("tokenizer.json: field 'normalizer'") && Contains("NFKQ"));
  }
  SECTION("a folder without config.json given as a model") {
    t::TempDir empty;
    CHECK_THAT(load_error(empty.path()), Contains("no config.json"));
  }
}

TEST_CASE("an NFC normalizer composes decomposed text before the model sees it", "[hf][nfc]") {
  t::TempDir dir;
  const t::TinyHfLlama tiny;
  tiny.write(dir.path());
  nlohmann::json tokenizer = tiny.tokenizer();
  tokenizer["normalizer"] = {{"type", "NFC"}};
  // á (U+00E1, bytes C3 A1) as one token: the byte-level alphabet spells those bytes "Ã" and "¡".
  tokenizer["model"]["vocab"]["\xC3\x83"] = 8;
  tokenizer["model"]["vocab"]["\xC2\xA1"] = 9;
  tokenizer["model"]["vocab"]["\xC3\x83\xC2\xA1"] = 10;
  tokenizer["model"]["merges"].push_back("\xC3\x83 \xC2\xA1");
  t::write_json(dir.path() / "tokenizer.json", tokenizer);
  const model::Model m = model::load_model(dir.path());
  CHECK_THAT(m.tokenizer_description, Contains("transformers"));
  CHECK(m.tokenizer->encode("ab a c<|im_end|>", true) == std::vector<int>{4, 5, 3, 2, 7});
  CHECK(m.tokenizer->encode("\xC3\xA1", true) == std::vector<int>{10});
  CHECK(m.tokenizer->encode("a\xCC\x81", true) == std::vector<int>{10});  // a + combining acute (U+0301)
}
