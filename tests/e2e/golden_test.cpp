// The engine on the default model against the golden fixture made by an independent implementation
// (Hugging Face transformers on the same GGUF; tools/make_golden.py): token ids, final logits, greedy text.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/model/model.h"
#include "tests/support/default_model.h"

using namespace kvscope;

namespace {

const std::filesystem::path kGolden = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "golden";

nlohmann::json golden() {
  std::ifstream in(kGolden / "smollm2_golden.json");
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

std::vector<float> read_logits(const std::string& file, std::size_t n) {
  std::ifstream in(kGolden / file, std::ios::binary);
  REQUIRE(in);
  std::vector<float> v(n);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  REQUIRE(in.gcount() == static_cast<std::streamsize>(n * sizeof(float)));
  return v;
}

// Logits agree to this bound (the fixture's float64 re-run differs from its float32 run by 5e-5).
constexpr double kLogitTolerance = 1e-2;

}  // namespace

TEST_CASE("tokenization equals the reference tokenizer's on every golden prompt") {
  const model::Model* m = test::default_model();
  const nlohmann::json fixture = golden();
  for (const auto& p : fixture["prompts"]) {
    INFO("prompt " << p["name"].get<std::string>());
    const auto ids = m->tokenizer->encode(p["text"].get<std::string>(), true);
    REQUIRE(ids == p["ids"].get<std::vector<int>>());
    REQUIRE(m->tokenizer->decode(ids) == p["text"].get<std::string>());
  }
}

TEST_CASE("final-position logits match the reference within 1e-2") {
  const model::Model* m = test::default_model();
  engine::Engine engine(*m);
  const nlohmann::json fixture = golden();
  for (const auto& p : fixture["prompts"]) {
    INFO("prompt " << p["name"].get<std::string>());
    const auto logits = engine.prompt_logits(p["ids"].get<std::vector<int>>());
    const auto reference = read_logits(p["final_logits_file"].get<std::string>(), logits.size());
    double max_diff = 0.0;
    for (std::size_t i = 0; i < logits.size(); ++i) max_diff = std::max(max_diff, std::abs(double(logits[i]) - reference[i]));
    INFO("max |logit difference| " << max_diff);
    REQUIRE(max_diff <= kLogitTolerance);
  }
}

TEST_CASE("greedy continuations of 64 tokens equal the reference") {
  const model::Model* m = test::default_model();
  engine::Engine engine(*m);
  engine::GenerateOptions options;
  options.max_new_tokens = 64;
  options.stop_at_end_of_generation = false;
  const nlohmann::json fixture = golden();
  for (const auto& p : fixture["prompts"]) {
    INFO("prompt " << p["name"].get<std::string>());
    const auto expected = p["greedy"]["ids"].get<std::vector<int>>();
    const auto margins = p["greedy"]["margin_top1_top2"].get<std::vector<double>>();
    const auto result = engine.generate(p["ids"].get<std::vector<int>>(), options);
    REQUIRE(result.generated_tokens.size() == expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k) {
      if (result.generated_tokens[k] == expected[k]) continue;
      // Two implementations within 1e-2 of each other may only pick differently where the reference's
      // own top-2 margin is below that bound; after such a step the sequences legitimately diverge.
      INFO("step " << k << ": got " << result.generated_tokens[k] << ", reference " << expected[k] << ", reference margin "
                   << margins[k]);
      REQUIRE(margins[k] < 2 * kLogitTolerance);
      WARN("prompt " << p["name"].get<std::string>() << " diverges at step " << k << " where the reference margin is "
                     << margins[k]);
      break;
    }
  }
}
