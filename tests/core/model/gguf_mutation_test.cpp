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
#include "tests/core/model/test_support.h"

using kvscope::model::GgufFile;
using kvscope::test::Rng;
namespace t = kvscope::test;

namespace {

// Values that tend to hit boundary checks when written over a count, length, offset or type field.
const uint64_t kInteresting[] = {0,          1,          2,          3,          4,          5,
                                 7,          8,          9,          12,         13,         16,
                                 31,         32,         33,         63,         64,         255,
                                 256,        4096,       65535,      65536,      0x7FFFFFFF, 0x80000000,
                                 0xFFFFFFFF, 1ull << 32, 1ull << 62, 1ull << 63, ~0ull,      ~0ull - 31};

void mutate(std::vector<uint8_t>& bytes, Rng& rng) {
  const int edits = 1 + static_cast<int>(rng.below(4));
  for (int e = 0; e < edits && !bytes.empty(); ++e) {
    const std::size_t at = rng.below(bytes.size());
    switch (rng.below(6)) {
      case 0:  // flip one bit
        bytes[at] ^= static_cast<uint8_t>(1u << rng.below(8));
        break;
      case 1:  // random byte
        bytes[at] = rng.byte();
        break;
      case 2: {  // a boundary value over 4 or 8 bytes, as a u32 or u64 field would hold it
        const uint64_t value = kInteresting[rng.below(std::size(kInteresting))];
        const std::size_t width = rng.below(2) ? 8 : 4;
        for (std::size_t i = 0; i < width && at + i < bytes.size(); ++i)
          bytes[at + i] = static_cast<uint8_t>(value >> (8 * i));
        break;
      }
      case 3:  // truncate
        bytes.resize(at);
        break;
      case 4: {  // delete a short run, shifting every later field
        const std::size_t n = std::min<std::size_t>(1 + rng.below(16), bytes.size() - at);
        bytes.erase(bytes.begin() + static_cast<long>(at), bytes.begin() + static_cast<long>(at + n));
        break;
      }
      default: {  // duplicate a short run
        const std::size_t n = std::min<std::size_t>(1 + rng.below(16), bytes.size() - at);
        const std::vector<uint8_t> run(bytes.begin() + static_cast<long>(at), bytes.begin() + static_cast<long>(at + n));
        bytes.insert(bytes.begin() + static_cast<long>(at), run.begin(), run.end());
        break;
      }
    }
  }
}

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

struct Outcome {
  int loaded = 0;
  int rejected = 0;
};

Outcome run_mutants(const std::vector<uint8_t>& original, uint64_t seed, int count, bool use_tensors) {
  Rng rng(seed);
  Outcome outcome;
  for (int i = 0; i < count; ++i) {
    std::vector<uint8_t> bytes = original;
    mutate(bytes, rng);
    INFO("mutant " << i << " of seed " << seed);
    try {
      const GgufFile file = GgufFile::open_memory(bytes.data(), bytes.size(), "mutant.gguf");
      if (use_tensors) use_everything(file);
      ++outcome.loaded;
    } catch (const kvscope::Error& e) {
      const std::string message = e.what();
      if (message.find("mutant.gguf") == std::string::npos || message.find('\n') != std::string::npos)
        FAIL("error message lacks the file name or spans lines: " << message);
      ++outcome.rejected;
    }
    // Anything other than kvscope::Error propagates and fails the test case.
  }
  return outcome;
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
  const Outcome outcome = run_mutants(original, 0x5EED, 6000, true);
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
  const Outcome outcome = run_mutants(b.build().bytes, 0xC0FFEE, 3000, false);
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
  const Outcome outcome = run_mutants(header, 0xBADC0DE, 2000, false);
  CHECK(outcome.loaded + outcome.rejected == 2000);
}
