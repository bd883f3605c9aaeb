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
#include "tests/support/golden_compare.h"

using namespace kvscope;

namespace {

const std::filesystem::path kGolden = std::filesystem::path(KVSCOPE_FIXTURES_DIR) / "golden";

nlohmann::json golden() { return test::read_json_fixture(kGolden / "smollm2_golden.json"); }

std::vector<float> read_logits(const std::string& file, std::size_t n) { return test::read_f32_file(kGolden / file, n); }

// Logits agree to this bound (the fixture's float64 re-run differs from its float32 run by 5e-5).
constexpr double kLogitTolerance = 1e-2;

// A half cache rounds every key and value once (relative 2^-11), which moves the final logits by up to 0.015 on
// these prompts (measured 2026-11-23: 0.005-0.015; float32: 3e-5-6e-5). It gets its own bound, so the float32
// cache, kvscope's default, keeps the tight one.
constexpr double kHalfCacheLogitTolerance = 2e-2;
struct CacheCase {
  kernels::CacheType type;
  double tolerance;
};
constexpr CacheCase kCacheCases[] = {{kernels::CacheType::F32, kLogitTolerance},
                                     {kernels::CacheType::F16, kHalfCacheLogitTolerance}};

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

TEST_CASE("final-position logits match the reference within 1e-2 (2e-2 with a half cache)") {
  const model::Model* m = test::default_model();
  engine::Engine engine(*m);
  const nlohmann::json fixture = golden();
  for (const auto [cache_type, tolerance] : kCacheCases)
    for (const auto& p : fixture["prompts"]) {
      INFO("prompt " << p["name"].get<std::string>() << ", cache " << kernels::cache_type_name(cache_type));
      const auto logits = engine.prompt_logits(p["ids"].get<std::vector<int>>(), cache_type);
      const auto reference = read_logits(p["final_logits_file"].get<std::string>(), logits.size());
      const double max_diff = test::max_abs_diff(logits, reference);
      INFO("max |logit difference| " << max_diff);
      REQUIRE(max_diff <= tolerance);
    }
}

TEST_CASE("greedy continuations of 64 tokens equal the reference") {
  const model::Model* m = test::default_model();
  engine::Engine engine(*m);
  engine::GenerateOptions options;
  options.max_new_tokens = 64;
  options.stop_at_end_of_generation = false;
  const nlohmann::json fixture = golden();
  for (const auto [cache_type, tolerance] : kCacheCases)
    for (const auto& p : fixture["prompts"]) {
      INFO("prompt " << p["name"].get<std::string>() << ", cache " << kernels::cache_type_name(cache_type));
      const auto expected = p["greedy"]["ids"].get<std::vector<int>>();
      const auto margins = p["greedy"]["margin_top1_top2"].get<std::vector<double>>();
      options.cache_type = cache_type;
      const auto result = engine.generate(p["ids"].get<std::vector<int>>(), options);
      test::check_greedy_matches(result.generated_tokens, expected, margins, tolerance);
    }
}
