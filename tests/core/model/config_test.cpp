// read_config on built files (defaults, validation messages) and on the real default model.
#include "core/model/config.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numbers>

#include "core/model/gguf.h"
#include "tests/core/model/gguf_builder.h"
#include "tests/core/model/test_support.h"

using kvscope::model::GgufFile;
using kvscope::model::ModelConfig;
using kvscope::model::read_config;
using kvscope::test::error_message;
using kvscope::test::GgufBuilder;
using kvscope::test::TempFile;
namespace t = kvscope::test;

namespace {

struct Keys {
  int64_t layers = 2, context = 512, dim = 64, ffn = 128, heads = 4;
  float eps = 1e-6f;
};

// The required keys of a small model; tests add the optional ones or change these through `keys`.
GgufBuilder base(const std::string& arch = "llama", const Keys& keys = {}) {
  GgufBuilder b;
  b.str("general.architecture", arch)
      .i64(arch + ".block_count", keys.layers)
      .i64(arch + ".context_length", keys.context)
      .i64(arch + ".embedding_length", keys.dim)
      .i64(arch + ".feed_forward_length", keys.ffn)
      .i64(arch + ".attention.head_count", keys.heads)
      .f32(arch + ".attention.layer_norm_rms_epsilon", keys.eps);
  return b;
}

ModelConfig config_of(const GgufBuilder& b) {
  const auto built = b.build();
  return read_config(GgufFile::open_memory(built.bytes.data(), built.bytes.size(), "config.gguf"));
}

void expect_config_error(const GgufBuilder& b, std::initializer_list<std::string> fragments) {
  const TempFile tmp("config.gguf", b.build().bytes);
  const GgufFile file = GgufFile::open(tmp.path());
  const std::string message = error_message([&] { read_config(file); });
  INFO("message: " << message);
  CHECK_THAT(message, Catch::Contains(tmp.path().string()));
  for (const auto& fragment : fragments) CHECK_THAT(message, Catch::Contains(fragment));
}

}  // namespace

TEST_CASE("read_config reads the llama keys and applies the documented defaults", "[config]") {
  auto b = base();
  b.string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  const ModelConfig c = config_of(b);
  CHECK(c.architecture == "llama");
  CHECK(c.name == "config");  // no general.name: the file's stem
  CHECK(c.n_layers == 2);
  CHECK(c.dim == 64);
  CHECK(c.ffn_dim == 128);
  CHECK(c.n_heads == 4);
  CHECK(c.n_kv_heads == 4);  // head_count_kv defaults to head_count
  CHECK(c.head_dim == 16);
  CHECK(c.group_size() == 1);
  CHECK(c.context_length == 512);
  CHECK(c.rope_dim == 16);  // defaults to head_dim
  CHECK(c.rope_base == 10000.0f);
  CHECK(c.rms_eps == 1e-6f);
  CHECK(c.vocab_size == 3);  // counted from the token list
  CHECK(c.tied_embeddings);  // no output.weight tensor
  CHECK(c.rope_style == kvscope::model::RopeStyle::AdjacentPairs);
}

TEST_CASE("read_config takes explicit values over defaults", "[config]") {
  auto b = base("mistral");
  b.str("general.name", "Named")
      .u64("mistral.attention.head_count_kv", 2)
      .f64("mistral.rope.freq_base", 1e6)
      .u16("mistral.rope.dimension_count", 8)
      .i32("mistral.vocab_size", 100)
      .string_array("tokenizer.ggml.tokens", {"a"})
      .u32("mistral.attention.key_length", 16);
  b.tensor("output.weight", {64, 100}, t::kTypeQ8_0, t::tensor_bytes(t::kTypeQ8_0, 6400, 1));
  const ModelConfig c = config_of(b);
  CHECK(c.architecture == "mistral");
  CHECK(c.name == "Named");
  CHECK(c.n_kv_heads == 2);
  CHECK(c.group_size() == 2);
  CHECK(c.rope_base == 1e6f);
  CHECK(c.rope_dim == 8);
  CHECK(c.vocab_size == 100);  // the key wins over the token list
  CHECK_FALSE(c.tied_embeddings);
}

TEST_CASE("read_config rejects unsupported architectures, listing the supported ones", "[config]") {
  expect_config_error(base("gpt2"), {"'general.architecture'", "'gpt2' is not supported", "supported: llama, mistral, qwen2, qwen3"});
  GgufBuilder none;
  none.u32("llama.block_count", 2);
  expect_config_error(none, {"'general.architecture'", "missing"});
}

TEST_CASE("read_config gives qwen2 biases and qwen3 q/k norms, both with half-split RoPE", "[config]") {
  auto qwen2 = base("qwen2");
  qwen2.u32("qwen2.vocab_size", 10);
  const ModelConfig c2 = config_of(qwen2);
  CHECK(c2.rope_style == kvscope::model::RopeStyle::HalfSplit);
  CHECK(c2.qkv_bias);
  CHECK_FALSE(c2.qk_norm);
  auto qwen3 = base("qwen3");
  qwen3.u32("qwen3.vocab_size", 10).u32("qwen3.attention.key_length", 32).u32("qwen3.attention.value_length", 32);
  const ModelConfig c3 = config_of(qwen3);
  CHECK(c3.rope_style == kvscope::model::RopeStyle::HalfSplit);
  CHECK(c3.qk_norm);
  CHECK_FALSE(c3.qkv_bias);
  CHECK(c3.head_dim == 32);  // decoupled from embedding_length / head_count = 16
  CHECK(c3.rope_dim == 32);
  CHECK(config_of([] {
          auto b = base();
          b.u32("llama.vocab_size", 10);
          return b;
        }())
            .rope_style == kvscope::model::RopeStyle::AdjacentPairs);
}

TEST_CASE("read_config validates ranges and divisibility, naming the key", "[config]") {
  SECTION("zero layers") {
    expect_config_error(base("llama", {.layers = 0}), {"'llama.block_count'", "0 is out of range (expected 1..1024)"});
  }
  SECTION("missing required key") {
    GgufBuilder b;
    b.str("general.architecture", "llama").u32("llama.block_count", 2);
    expect_config_error(b, {"'llama.embedding_length'", "missing"});
  }
  SECTION("wrong type") {
    GgufBuilder b;
    b.str("general.architecture", "llama").str("llama.block_count", "thirty");
    expect_config_error(b, {"'llama.block_count'", "expected an integer", "found string"});
  }
  SECTION("heads that do not divide dim") {
    expect_config_error(base("llama", {.heads = 5}),
                        {"'llama.attention.head_count'", "5 does not divide embedding_length 64"});
  }
  SECTION("kv heads that do not divide heads") {
    auto b = base();
    b.u32("llama.attention.head_count_kv", 3).u32("llama.vocab_size", 10);
    expect_config_error(b, {"'llama.attention.head_count_kv'", "3 does not divide head_count 4"});
  }
  SECTION("more kv heads than heads") {
    auto b = base();
    b.u32("llama.attention.head_count_kv", 8).u32("llama.vocab_size", 10);
    expect_config_error(b, {"'llama.attention.head_count_kv'", "8 is out of range (expected 1..4)"});
  }
  SECTION("absurd sizes") {
    auto b = base();
    b.u64("llama.vocab_size", uint64_t{1} << 40);
    expect_config_error(b, {"'llama.vocab_size'", "out of range"});
  }
  SECTION("negative context") {
    expect_config_error(base("llama", {.context = -1}), {"'llama.context_length'", "-1 is out of range"});
  }
  SECTION("rope dimensions") {
    auto odd = base();
    odd.u32("llama.rope.dimension_count", 7).u32("llama.vocab_size", 10);
    expect_config_error(odd, {"'llama.rope.dimension_count'", "7 is odd"});
    auto wide = base();
    wide.u32("llama.rope.dimension_count", 32).u32("llama.vocab_size", 10);
    expect_config_error(wide, {"'llama.rope.dimension_count'", "32 is out of range (expected 2..16)"});
  }
  SECTION("bad floats") {
    auto zero_base = base();
    zero_base.f32("llama.rope.freq_base", 0.0f).u32("llama.vocab_size", 10);
    expect_config_error(zero_base, {"'llama.rope.freq_base'", "out of range"});
    auto nan_eps = base("llama", {.eps = std::numeric_limits<float>::quiet_NaN()});
    nan_eps.u32("llama.vocab_size", 10);
    expect_config_error(nan_eps, {"'llama.attention.layer_norm_rms_epsilon'", "finite"});
  }
  SECTION("value length differing from the key length") {
    auto b = base();
    b.u32("llama.attention.key_length", 128).u32("llama.attention.value_length", 64).u32("llama.vocab_size", 10);
    expect_config_error(b, {"'llama.attention.value_length'", "64 differs from the key length 128"});
  }
  SECTION("no vocabulary size anywhere") {
    expect_config_error(base(), {"'llama.vocab_size'", "missing", "tokenizer.ggml.tokens"});
  }
}

TEST_CASE("read_config on the real default model", "[config][real]") {
  KVSCOPE_REQUIRE_REAL_MODEL();
  const GgufFile file = GgufFile::open(t::real_model_path());
  const ModelConfig c = read_config(file);
  CHECK(c.architecture == "llama");
  CHECK(c.n_layers == 30);
  CHECK(c.n_heads == 9);
  CHECK(c.n_kv_heads == 3);
  CHECK(c.group_size() == 3);
  CHECK(c.dim == 576);
  CHECK(c.head_dim == 64);
  CHECK(c.ffn_dim == 1536);
  CHECK(c.vocab_size == 49152);
  CHECK(c.context_length == 8192);
  CHECK(c.rope_base == 100000.0f);
  CHECK(c.rope_dim == 64);
  CHECK(c.rms_eps == Approx(1e-5f));
  CHECK(c.tied_embeddings);
  CHECK(c.rope_style == kvscope::model::RopeStyle::AdjacentPairs);
}

TEST_CASE("read_config reads the rope scaling keys for every architecture, as llama.cpp's converter writes them",
          "[config][rope]") {
  using kvscope::model::RopeScaling;
  SECTION("YaRN with every key (qwen3)") {
    auto b = base("qwen3");
    b.u32("qwen3.vocab_size", 10)
        .str("qwen3.rope.scaling.type", "yarn")
        .f32("qwen3.rope.scaling.factor", 4.0f)
        .u32("qwen3.rope.scaling.original_context_length", 128)
        .f32("qwen3.rope.scaling.yarn_beta_fast", 8.0f)
        .f32("qwen3.rope.scaling.yarn_beta_slow", 2.0f)
        .f32("qwen3.rope.scaling.yarn_attn_factor", 1.5f)
        .f32("qwen3.rope.scaling.attn_factor", 0.5f);
    const ModelConfig c = config_of(b);
    CHECK(c.rope_scaling.type == "yarn");
    CHECK(c.rope_scaling.factor == 4.0);
    CHECK(c.rope_scaling.original_context == 128);
    CHECK(c.rope_scaling.beta_fast == 8.0);
    CHECK(c.rope_scaling.beta_slow == 2.0);
    CHECK(c.rope_scaling.truncate);
    CHECK(c.rope_attention_factor == Approx(0.75));  // yarn_attn_factor times llama.cpp's attn_factor
    RopeScaling expected;
    expected.type = "yarn";
    expected.factor = 4.0;
    expected.original_context = 128;
    expected.beta_fast = 8.0;
    expected.beta_slow = 2.0;
    CHECK(c.rope_freq_divisors == kvscope::model::rope_freq_divisors(expected, 16, 10000.0));
    CHECK(c.rope_freq_divisors.size() == 8);
  }
  SECTION("YaRN's defaults (llama): betas 32 / 1, original context = context length, 0.1 ln(factor) + 1") {
    auto b = base();
    b.u32("llama.vocab_size", 10).str("llama.rope.scaling.type", "yarn").f32("llama.rope.scaling.factor", 8.0f);
    const ModelConfig c = config_of(b);
    CHECK(c.rope_scaling.beta_fast == 32.0);
    CHECK(c.rope_scaling.beta_slow == 1.0);
    CHECK(c.rope_scaling.original_context == 512);
    CHECK(c.rope_attention_factor == Approx(0.1 * std::log(8.0) + 1.0));
  }
  SECTION("YaRN's log multiplier: mscale(1) / mscale(m), transformers' mscale_all_dim") {
    auto b = base();
    b.u32("llama.vocab_size", 10)
        .str("llama.rope.scaling.type", "yarn")
        .f32("llama.rope.scaling.factor", 8.0f)
        .f32("llama.rope.scaling.yarn_log_multiplier", 0.5f);
    CHECK(config_of(b).rope_attention_factor == Approx((0.1 * std::log(8.0) + 1.0) / (0.05 * std::log(8.0) + 1.0)));
  }
  SECTION("YaRN's partial ramp (yarn_ext_factor): llama.cpp's rope_yarn blend of the angles, in closed form") {
    // rope_yarn: theta = theta_interp (1 - m) + theta_extrap m with m = ramp * ext_factor, ramp = 1 - clamp((i -
    // low) / max(0.001, high - low)) over pair i, low / high the floored / ceiled correction dimensions of beta_fast
    // / beta_slow; the divisor is theta_extrap / theta. Its magnitude: YaRN's 0.1 ln(factor) + 1 for any
    // ext_factor but 0, where llama.cpp applies none.
    const double factor = 4.0, base_freq = 10000.0;
    const int rope_dim = 16, original = 4096;
    const auto corr_dim = [&](double rotations) {
      return rope_dim * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base_freq));
    };
    const double low = std::max(0.0, std::floor(corr_dim(16.0))),
                 high = std::min(rope_dim - 1.0, std::ceil(corr_dim(2.0)));
    REQUIRE(low > 0.0);  // the ramp lies inside the pairs, so both ends are exercised
    REQUIRE(high < rope_dim / 2 - 1);
    for (const float ext : {0.0f, 0.25f, 0.5f, 1.0f}) {
      INFO("yarn_ext_factor " << ext);
      auto b = base();
      b.u32("llama.vocab_size", 10)
          .str("llama.rope.scaling.type", "yarn")
          .f32("llama.rope.scaling.factor", static_cast<float>(factor))
          .u32("llama.rope.scaling.original_context_length", original)
          .f32("llama.rope.scaling.yarn_beta_fast", 16.0f)
          .f32("llama.rope.scaling.yarn_beta_slow", 2.0f)
          .f32("llama.rope.scaling.yarn_ext_factor", ext)
          .f32("llama.rope.scaling.attn_factor", 0.5f);
      const ModelConfig c = config_of(b);
      CHECK(c.rope_scaling.ext_factor == ext);
      REQUIRE(c.rope_freq_divisors.size() == rope_dim / 2);
      for (int i = 0; i < rope_dim / 2; ++i) {
        const double ramp = 1.0 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
        const double mix = ramp * ext;
        CHECK(c.rope_freq_divisors[i] == Approx(1.0 / ((1.0 - mix) / factor + mix)).epsilon(1e-6));
      }
      CHECK(c.rope_attention_factor == Approx(0.5 * (ext == 0.0f ? 1.0 : 0.1 * std::log(factor) + 1.0)));
    }
    // At 0 a given yarn_attn_factor is the magnitude, as llama.cpp takes it where it reads the key.
    auto b = base();
    b.u32("llama.vocab_size", 10)
        .str("llama.rope.scaling.type", "yarn")
        .f32("llama.rope.scaling.factor", 4.0f)
        .f32("llama.rope.scaling.yarn_ext_factor", 0.0f)
        .f32("llama.rope.scaling.yarn_attn_factor", 1.5f);
    const ModelConfig c = config_of(b);
    CHECK(c.rope_attention_factor == Approx(1.5));
    CHECK(c.rope_freq_divisors == std::vector<float>(8, 4.0f));
  }
  SECTION("linear, also from a factor without a type as llama.cpp reads it (gemma2)") {
    for (const bool typed : {true, false}) {
      auto b = base("gemma2");
      b.u32("gemma2.vocab_size", 10).f32("gemma2.rope.scaling.factor", 2.0f);
      if (typed) b.str("gemma2.rope.scaling.type", "linear");
      const ModelConfig c = config_of(b);
      CHECK(c.rope_scaling.type == "linear");
      CHECK(c.rope_freq_divisors == std::vector<float>(8, 2.0f));
    }
  }
  SECTION("none, or no keys: no scaling") {
    auto b = base("qwen2");
    b.u32("qwen2.vocab_size", 10).str("qwen2.rope.scaling.type", "none").f32("qwen2.rope.scaling.factor", 4.0f);
    const ModelConfig c = config_of(b);
    CHECK(c.rope_scaling.type == "default");
    CHECK(c.rope_freq_divisors.empty());
    CHECK(c.rope_attention_factor == 1.0f);
  }
  SECTION("what kvscope does not compute is refused, naming the key and the value") {
    auto dynamic = base("qwen2");
    dynamic.u32("qwen2.vocab_size", 10).str("qwen2.rope.scaling.type", "dynamic");
    expect_config_error(dynamic, {"'qwen2.rope.scaling.type'", "\"dynamic\" is not supported",
                                  "supported: none, linear, yarn, longrope"});
    for (const float bad : {1.5f, -0.25f, std::numeric_limits<float>::quiet_NaN()}) {
      auto ext = base();
      ext.u32("llama.vocab_size", 10)
          .str("llama.rope.scaling.type", "yarn")
          .f32("llama.rope.scaling.factor", 4.0f)
          .f32("llama.rope.scaling.yarn_ext_factor", bad);
      expect_config_error(ext, {"'llama.rope.scaling.yarn_ext_factor'", std::isnan(bad) ? "nan" : std::to_string(bad),
                                "is out of range (expected a value in [0, 1])"});
    }
    auto longrope = base("phi3");
    longrope.u32("phi3.vocab_size", 10).str("phi3.rope.scaling.type", "longrope");
    expect_config_error(longrope, {"'rope_factors_short.weight'", "tensor missing"});
    auto zero = base();
    zero.u32("llama.vocab_size", 10).str("llama.rope.scaling.type", "yarn").f32("llama.rope.scaling.factor", 0.0f);
    expect_config_error(zero, {"'llama.rope.scaling.factor'", "out of range"});
  }
}
