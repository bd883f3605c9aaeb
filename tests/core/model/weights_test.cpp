// bind_weights on built tiny models (shapes, types, tying, errors) and on the real model.
#include "core/model/weights.h"

#include <catch2/catch.hpp>
#include <cstring>

#include "core/model/config.h"
#include "core/model/gguf.h"
#include "kernels/common/dequantize.h"
#include "tests/core/model/gguf_builder.h"
#include "tests/core/model/test_support.h"

using kvscope::model::bind_weights;
using kvscope::model::GgmlType;
using kvscope::model::GgufFile;
using kvscope::model::read_config;
using kvscope::test::error_message;
using kvscope::test::TempFile;
namespace t = kvscope::test;

namespace {

std::string bind_error(const kvscope::test::GgufBuilder& b) {
  const TempFile tmp("weights.gguf", b.build().bytes);
  const GgufFile file = GgufFile::open(tmp.path());
  const auto config = read_config(file);
  const std::string message = error_message([&] { bind_weights(file, config); });
  CHECK_THAT(message, Catch::Contains(tmp.path().string()));
  return message;
}

}  // namespace

TEST_CASE("bind_weights binds every tensor of a tiny llama", "[weights]") {
  for (bool tied : {true, false}) {
    INFO("tied " << tied);
    t::TinyLlama shape;
    shape.tied = tied;
    const auto built = t::tiny_llama_builder(shape).build();
    const GgufFile file = GgufFile::open_memory(built.bytes.data(), built.bytes.size(), "tiny.gguf");
    const auto config = read_config(file);
    CHECK(config.tied_embeddings == tied);
    const auto w = bind_weights(file, config);
    REQUIRE(w.layers.size() == 2);

    CHECK(w.token_embedding.type == GgmlType::Q8_0);
    CHECK(w.token_embedding.rows == 40);
    CHECK(w.token_embedding.cols == 64);
    CHECK(w.token_embedding.row_bytes == 2 * 34);
    CHECK(w.token_embedding.data == file.tensor("token_embd.weight").data);
    CHECK(w.token_embedding.row(3) == w.token_embedding.data + 3 * 68);
    if (tied) {
      CHECK(w.output.data == w.token_embedding.data);
      CHECK(w.output.type == GgmlType::Q8_0);
    } else {
      CHECK(w.output.data == file.tensor("output.weight").data);
      CHECK(w.output.type == GgmlType::Q4_1);
    }
    CHECK(w.output.rows == 40);

    const auto& l1 = w.layers[1];
    CHECK(l1.wq.rows == 64);
    CHECK(l1.wq.cols == 64);
    CHECK(l1.wk.rows == 32);  // 2 kv heads of 16
    CHECK(l1.wv.rows == 32);
    CHECK(l1.wo.rows == 64);
    CHECK(l1.w_gate.rows == 96);
    CHECK(l1.w_up.cols == 64);
    CHECK(l1.w_down.rows == 64);
    CHECK(l1.w_down.cols == 96);
    CHECK(l1.w_down.row_bytes == 3 * 20);
    CHECK(l1.wk.data == file.tensor("blk.1.attn_k.weight").data);

    // Norm vectors are copies of the F32 data.
    std::vector<float> expected(64);
    std::memcpy(expected.data(), file.tensor("blk.1.ffn_norm.weight").data, 64 * sizeof(float));
    CHECK(l1.ffn_norm == expected);
    CHECK(w.output_norm.size() == 64);
  }
}

TEST_CASE("bind_weights dequantizes F16 and BF16 norm vectors", "[weights]") {
  for (uint32_t norm_type : {t::kTypeF16, t::kTypeBF16}) {
    t::TinyLlama shape;
    shape.norm_type = norm_type;
    shape.matrix_type = t::kTypeF16;
    const auto built = t::tiny_llama_builder(shape).build();
    const GgufFile file = GgufFile::open_memory(built.bytes.data(), built.bytes.size(), "tiny.gguf");
    const auto w = bind_weights(file, read_config(file));
    const auto& info = file.tensor("blk.0.attn_norm.weight");
    for (int i = 0; i < 64; ++i) {
      const auto bits = static_cast<uint16_t>(info.data[2 * i] | (info.data[2 * i + 1] << 8));
      const float expected =
          norm_type == t::kTypeF16 ? kvscope::kernels::fp16_to_fp32(bits) : kvscope::kernels::bf16_to_fp32(bits);
      CHECK(w.layers[0].attn_norm[i] == expected);
    }
    CHECK(w.layers[0].wq.type == GgmlType::F16);
    CHECK(w.layers[0].wq.row_bytes == 128);
  }
}

TEST_CASE("bind_weights names the tensor and what was expected", "[weights]") {
  SECTION("missing tensor") {
    // The file claims 3 layers but holds tensors for 2 (kv2 is llama.block_count).
    auto tiny = t::tiny_llama_builder().build();
    tiny.patch<uint32_t>("kv2.value", 3);
    const TempFile tmp("weights.gguf", tiny.bytes);
    const GgufFile file = GgufFile::open(tmp.path());
    const auto config = read_config(file);
    REQUIRE(config.n_layers == 3);
    CHECK_THAT(error_message([&] { bind_weights(file, config); }),
               Catch::Contains(tmp.path().string()) && Catch::Contains("tensor 'blk.2.attn_norm.weight'") &&
                   Catch::Contains("not found"));
  }
  SECTION("wrong matrix shape") {
    auto tiny = t::tiny_llama_builder().build();
    // token_embd.weight is tensor0 with shape [64, 40]; claim 39 rows (its data still fits in the file).
    tiny.patch<uint64_t>("tensor0.dim1", 39);
    const TempFile tmp("weights.gguf", tiny.bytes);
    const GgufFile file = GgufFile::open(tmp.path());
    CHECK_THAT(error_message([&] { bind_weights(file, read_config(file)); }),
               Catch::Contains("tensor 'token_embd.weight' shape: [64, 39] (expected [64, 40]"));
  }
  SECTION("wrong vector shape") {
    auto tiny = t::tiny_llama_builder().build();
    tiny.patch<uint64_t>("tensor1.dim0", 32);  // output_norm.weight
    const TempFile tmp("weights.gguf", tiny.bytes);
    const GgufFile file = GgufFile::open(tmp.path());
    CHECK_THAT(error_message([&] { bind_weights(file, read_config(file)); }),
               Catch::Contains("tensor 'output_norm.weight' shape: [32] (expected [64])"));
  }
  SECTION("unsupported matrix type") {
    t::TinyLlama shape;
    shape.matrix_type = t::kTypeQ5_1;
    CHECK_THAT(bind_error(t::tiny_llama_builder(shape)),
               Catch::Contains("tensor 'blk.0.attn_q.weight' type: Q5_1 is not supported") &&
                   Catch::Contains("supported: F32, F16, Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K, BF16, MXFP4"));
  }
  SECTION("quantized norm vector") {
    t::TinyLlama shape;
    shape.norm_type = t::kTypeQ8_0;
    CHECK_THAT(bind_error(t::tiny_llama_builder(shape)),
               Catch::Contains("tensor 'output_norm.weight' type: Q8_0") && Catch::Contains("expected F32, F16 or BF16"));
  }
}

TEST_CASE("bind_weights on the real default model", "[weights][real]") {
  KVSCOPE_REQUIRE_REAL_MODEL();
  const GgufFile file = GgufFile::open(t::real_model_path());
  const auto config = read_config(file);
  const auto w = bind_weights(file, config);
  CHECK(w.layers.size() == 30);
  CHECK(w.token_embedding.type == GgmlType::Q8_0);
  CHECK(w.token_embedding.rows == 49152);
  CHECK(w.token_embedding.cols == 576);
  CHECK(w.output.data == w.token_embedding.data);  // tied
  CHECK(w.layers[29].wk.rows == 192);
  CHECK(w.layers[29].wk.type == GgmlType::Q4_1);
  CHECK(w.layers[0].w_down.cols == 1536);
  CHECK(w.output_norm.size() == 576);
  // The last row of the last matrix ends exactly where its tensor's data ends.
  const auto& down = w.layers[29].w_down;
  const auto& info = file.tensor("blk.29.ffn_down.weight");
  CHECK(down.row(down.rows - 1) + down.row_bytes == info.data + info.n_bytes);
}
