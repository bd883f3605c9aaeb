// Thousands of corrupted safetensors images must each load or throw kvscope::Error naming the file, never
// crash or read outside the image (the sanitizer build runs this too).
#include <catch2/catch.hpp>

#include "core/model/safetensors.h"
#include "tests/core/model/mutation.h"
#include "tests/core/model/safetensors_builder.h"

using kvscope::model::SafetensorsFile;
namespace t = kvscope::test;

TEST_CASE("mutated safetensors images load or fail with kvscope::Error", "[safetensors][mutation]") {
  const auto original =
      t::safetensors_image({{"model.embed_tokens.weight", "F32", {4, 3}, t::f32_bytes(std::vector<float>(12, 1.0f))},
                            {"model.norm.weight", "BF16", {3}, std::vector<uint8_t>(6, 0x3F)},
                            {"lm_head.weight", "F16", {2, 2}, std::vector<uint8_t>(8, 0x3C)},
                            {"empty", "F32", {0}, {}}},
                           {{"format", "pt"}});
  const auto use = [](const std::vector<uint8_t>& bytes) {
    const SafetensorsFile file = SafetensorsFile::open_memory(bytes.data(), bytes.size(), "mutant.safetensors");
    unsigned checksum = 0;  // every byte a loaded file offers must be readable
    for (const auto& tensor : file.tensors())
      for (uint64_t i = 0; i < tensor.n_bytes; ++i) checksum += tensor.data[i];
    (void)checksum;
  };
  use(original);  // the unmutated image loads, or the mutants would test nothing
  const t::MutationOutcome outcome = t::run_mutants(original, 0x5AFE, 8000, "mutant.safetensors", use);
  INFO("loaded " << outcome.loaded << ", rejected " << outcome.rejected);
  CHECK(outcome.loaded + outcome.rejected == 8000);
  CHECK(outcome.loaded > 100);  // mutations inside tensor data or whitespace keep the file valid
  CHECK(outcome.rejected > 4000);
}
