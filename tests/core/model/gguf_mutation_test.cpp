// Deterministic mutation testing: thousands of corrupted variants of valid GGUF images must each either
// load or throw kvscope::Error, never crash, hang or allocate absurdly (run under ASan to catch overreads).
#include <catch2/catch.hpp>
#include <fstream>
#include <limits>

#include "core/model/config.h"
#include "core/model/gguf.h"
#include "core/model/weights.h"
#include "kernels/common/dequantize.h"
#include "tests/core/model/gguf_builder.h"
#include "tests/core/model/mutation.h"
#include "tests/core/model/test_support.h"

using kvscope::model::GgufFile;
namespace t = kvscope::test;

namespace {

// Everything a loaded file offers must be usable: config, weights, and every byte of every tensor.
void use_everything(const GgufFile& file) {
  unsigned checksum = 0;
  for (const auto& tensor : file.tensors()) {
    if (tensor.n_bytes > 0) checksum += tensor.data[0] + tensor.data[tensor.n_bytes - 1];
  }
  (void)checksum;
  const auto config = kvscope::model::read_config(file);
  const auto weights = kvscope::model::bind_weights(file, config);
  std::vector<float> row(static_cast<std::size_t>(weights.token_embedding.cols));
  kvscope::kernels::dequantize_row(weights.token_embedding.type, weights.token_embedding.row(config.vocab_size - 1),
                                   row.data(), weights.token_embedding.cols);
}

t::MutationOutcome run_mutants(const std::vector<uint8_t>& original, uint64_t seed, int count, bool use_tensors) {
  return t::run_mutants(original, seed, count, "mutant.gguf", [&](const std::vector<uint8_t>& bytes) {
    const GgufFile file = GgufFile::open_memory(bytes.data(), bytes.size(), "mutant.gguf");
    if (use_tensors) use_everything(file);
  });
}

}  // namespace

TEST_CASE("mutated small GGUF models load or fail with kvscope::Error", "[gguf][mutation]") {
  t::TinyLlama shape;
  shape.layers = 1;
  shape.tied = false;
  const auto original = t::tiny_llama_builder(shape).build().bytes;
  // The unmutated image must load, or the mutants would test nothing.
  {
    const GgufFile file = GgufFile::open_memory(original.data(), original.size(), "mutant.gguf");
    use_everything(file);
  }
  const t::MutationOutcome outcome = run_mutants(original, 0x5EED, 6000, true);
  INFO("loaded " << outcome.loaded << ", rejected " << outcome.rejected);
  CHECK(outcome.loaded + outcome.rejected == 6000);
  // Mutations that land in tensor data leave the file valid; header mutations mostly break it.
  CHECK(outcome.loaded > 100);
  CHECK(outcome.rejected > 1000);
}

TEST_CASE("mutated metadata-only GGUF images load or fail with kvscope::Error", "[gguf][mutation]") {
  t::GgufBuilder b;
  b.str("general.architecture", "llama")
      .u32("llama.block_count", 30)
      .f32("llama.rope.freq_base", 1e5f)
      .boolean("flag", true)
      .i64("i64", -1)
      .f64("f64", 0.5)
      .array<int32_t>("ints", t::kGgufI32, {1, 2, 3})
      .string_array("tokens", {"a", "bb", "ccc", "<|im_end|>"})
      .alignment(64);
  b.tensor("w", {32, 1}, t::kTypeQ4_1, t::tensor_bytes(t::kTypeQ4_1, 32, 1));
  const t::MutationOutcome outcome = run_mutants(b.build().bytes, 0xC0FFEE, 3000, false);
  CHECK(outcome.loaded + outcome.rejected == 3000);
  CHECK(outcome.rejected > 1000);
}

TEST_CASE("mutated headers of the real model load or fail with kvscope::Error", "[gguf][mutation][real]") {
  KVSCOPE_REQUIRE_REAL_MODEL();
  std::ifstream in(t::real_model_path(), std::ios::binary);
  std::vector<uint8_t> header(64 * 1024);
  in.read(reinterpret_cast<char*>(header.data()), static_cast<std::streamsize>(header.size()));
  REQUIRE(in.gcount() == static_cast<std::streamsize>(header.size()));
  // The first 64 KiB end inside the token list, so the unmutated prefix itself is a truncated file.
  CHECK_THROWS_AS(GgufFile::open_memory(header.data(), header.size(), "mutant.gguf"), kvscope::Error);
  const t::MutationOutcome outcome = run_mutants(header, 0xBADC0DE, 2000, false);
  CHECK(outcome.loaded + outcome.rejected == 2000);
}
