// The engine on SmolLM2 as Hugging Face folders (f32 sharded, bf16 single file; converted from the default GGUF by
// tools/gguf_to_hf_folder.py at build time) against transformers on the same folders (tools/make_hf_golden.py),
// and against kvscope's own GGUF path on the same weights.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/common/sha256.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "tests/support/default_model.h"
#include "tests/support/golden_compare.h"

using namespace kvscope;

namespace {

const std::filesystem::path kGolden = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "hf_golden";
const std::filesystem::path kFolders = KVSCOPE_HF_FIXTURES_DIR;

// Logits agree to this bound, as in golden_test.cpp (fp32 summation order differs between implementations).
constexpr double kLogitTolerance = 1e-2;

const nlohmann::json& golden() {
  static const nlohmann::json json = test::read_json_fixture(kGolden / "smollm2_hf_golden.json");
  return json;
}

const model::Model& folder_model(const std::string& label) {
  static std::map<std::string, std::unique_ptr<model::Model>> loaded;
  auto& slot = loaded[label];
  if (!slot) {
    INFO("the Hugging Face test folders are made by the build (target kvscope_hf_fixtures): " << kFolders / label);
    REQUIRE(std::filesystem::is_directory(kFolders / label));
    slot = std::make_unique<model::Model>(model::load_model(kFolders / label));
  }
  return *slot;
}

std::vector<float> read_logits(const std::string& file, std::size_t n) {
  return test::read_f32_file(kGolden / file, n);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) { return test::max_abs_diff(a, b); }

}  // namespace

TEST_CASE("the Hugging Face folders are the ones the golden was made from", "[hf]") {
  for (const std::string label : {"f32", "bf16"}) {
    const auto& files = golden()["folders"][label]["weight_files"];
    for (const auto& [name, digest] : files.items()) {
      INFO(label << "/" << name << ": rebuild the folders (tools/gguf_to_hf_folder.py) or the golden");
      REQUIRE(file_sha256(kFolders / label / name) == digest.get<std::string>());
    }
  }
}

TEST_CASE("a Hugging Face folder loads as LlamaForCausalLM with rotate-half RoPE", "[hf]") {
  const model::Model& m = folder_model("bf16");
  CHECK(m.format() == model::ModelFormat::HuggingFace);
  CHECK(m.config.architecture == "LlamaForCausalLM");
  CHECK(m.config.rope_style == model::RopeStyle::HalfSplit);
  CHECK(m.config.n_layers == 30);
  CHECK(m.config.n_heads == 9);
  CHECK(m.config.n_kv_heads == 3);
  CHECK(m.config.tied_embeddings);
  CHECK(m.weights.layers[0].wq.type == model::GgmlType::BF16);
  CHECK_THAT(m.tokenizer_description, Catch::StartsWith("transformers 5.2.0 ") && Catch::Contains("decoder ByteLevel"));
  CHECK(m.hf_folder()->weight_bytes() == std::filesystem::file_size(kFolders / "bf16" / "model.safetensors") - 8 - [&] {
    std::ifstream in(kFolders / "bf16" / "model.safetensors", std::ios::binary);
    uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    return n;
  }());
}

TEST_CASE("tokenizer.json tokenizes as transformers' tokenizer does", "[hf]") {
  const model::Model& m = folder_model("f32");
  for (const auto& entry : golden()["folders"]["f32"]["tokenizer"]) {
    const std::string text = entry["text"].get<std::string>();
    INFO(text);
    const auto ids = m.tokenizer->encode(text, true);
    CHECK(ids == entry["ids"].get<std::vector<int>>());
    CHECK(m.tokenizer->decode(ids) == entry["decoded"].get<std::string>());
  }
  for (const auto& p : golden()["folders"]["f32"]["prompts"]) {
    INFO(p["name"].get<std::string>());
    CHECK(m.tokenizer->encode(p["text"].get<std::string>(), true) == p["ids"].get<std::vector<int>>());
  }
}

TEST_CASE("final logits on the f32 and bf16 folders match transformers within 1e-2", "[hf]") {
  for (const std::string label : {"f32", "bf16"}) {
    engine::Engine engine(folder_model(label));
    for (const auto& p : golden()["folders"][label]["prompts"]) {
      INFO(label << " prompt " << p["name"].get<std::string>());
      const auto logits = engine.prompt_logits(p["ids"].get<std::vector<int>>());
      const double diff = max_abs_diff(logits, read_logits(p["final_logits_file"].get<std::string>(), logits.size()));
      INFO("max |logit difference| " << diff);
      CHECK(diff <= kLogitTolerance);
    }
  }
}

TEST_CASE("greedy continuations on the bf16 folder equal transformers'", "[hf]") {
  engine::Engine engine(folder_model("bf16"));
  engine::GenerateOptions options;
  options.stop_at_end_of_generation = false;
  for (const auto& p : golden()["folders"]["bf16"]["prompts"]) {
    INFO("prompt " << p["name"].get<std::string>());
    const auto expected = p["greedy"]["ids"].get<std::vector<int>>();
    const auto margins = p["greedy"]["margin_top1_top2"].get<std::vector<double>>();
    options.max_new_tokens = static_cast<int>(expected.size());
    const auto result = engine.generate(p["ids"].get<std::vector<int>>(), options);
    test::check_greedy_matches(result.generated_tokens, expected, margins, kLogitTolerance);
  }
}

TEST_CASE("the GGUF and the Hugging Face folders of the same weights agree to the quantisation error", "[hf]") {
  engine::Engine gguf(*test::default_model());
  engine::Engine f32(folder_model("f32"));
  engine::Engine bf16(folder_model("bf16"));
  for (std::size_t i = 0; i < golden()["folders"]["f32"]["prompts"].size(); ++i) {
    const auto& p = golden()["folders"]["f32"]["prompts"][i];
    INFO("prompt " << p["name"].get<std::string>());
    const auto ids = p["ids"].get<std::vector<int>>();
    const auto from_gguf = gguf.prompt_logits(ids);
    // The f32 folder holds the GGUF's weights dequantised exactly: only summation order differs.
    const double f32_diff = max_abs_diff(from_gguf, f32.prompt_logits(ids));
    INFO("GGUF vs f32 folder " << f32_diff);
    CHECK(f32_diff <= kLogitTolerance);
    // bf16 rounding moves the logits by about as much as it moves transformers' own (its f32 vs bf16 folder).
    const std::size_t n = from_gguf.size();
    const double reference_rounding =
        max_abs_diff(read_logits(p["final_logits_file"].get<std::string>(), n),
                     read_logits(golden()["folders"]["bf16"]["prompts"][i]["final_logits_file"].get<std::string>(), n));
    const double bf16_diff = max_abs_diff(from_gguf, bf16.prompt_logits(ids));
    INFO("GGUF vs bf16 folder " << bf16_diff << ", transformers f32 vs bf16 " << reference_rounding);
    CHECK(bf16_diff <= reference_rounding + 2 * kLogitTolerance);
    CHECK(reference_rounding > 0.0);
  }
}
