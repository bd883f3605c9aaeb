#include "kernels/ggml_type.h"

#include <array>
#include <limits>

#include "kernels/error.h"

namespace kvscope::kernels {
namespace {

struct TypeEntry {
  uint32_t id;
  GgmlTypeTraits traits;
};

// Block geometry as in ggml-common.h. Types kvscope cannot dequantize still get an entry so that a file
// using them opens (and `kvscope info` can describe it) and only binding the weights fails. MXFP4 (llama.cpp's
// MXFP4_MOE experts, gpt-oss) is dequantized on the CPU only.
constexpr std::array kTypes = {
    TypeEntry{0, {"F32", 1, 4, true}},
    TypeEntry{1, {"F16", 1, 2, true}},
    TypeEntry{2, {"Q4_0", 32, 18, true}},
    TypeEntry{3, {"Q4_1", 32, 20, true}},
    TypeEntry{6, {"Q5_0", 32, 22, true}},
    TypeEntry{7, {"Q5_1", 32, 24, false}},
    TypeEntry{8, {"Q8_0", 32, 34, true}},
    // Current ggml stores Q8_1's two scales as halves (36 bytes); the gguf-py table still says 40.
    TypeEntry{9, {"Q8_1", 32, 36, false}},
    TypeEntry{10, {"Q2_K", 256, 84, false}},
    TypeEntry{11, {"Q3_K", 256, 110, false}},
    TypeEntry{12, {"Q4_K", 256, 144, true}},
    TypeEntry{13, {"Q5_K", 256, 176, false}},
    TypeEntry{14, {"Q6_K", 256, 210, true}},
    TypeEntry{15, {"Q8_K", 256, 292, false}},
    TypeEntry{16, {"IQ2_XXS", 256, 66, false}},
    TypeEntry{17, {"IQ2_XS", 256, 74, false}},
    TypeEntry{18, {"IQ3_XXS", 256, 98, false}},
    TypeEntry{19, {"IQ1_S", 256, 50, false}},
    TypeEntry{20, {"IQ4_NL", 32, 18, false}},
    TypeEntry{21, {"IQ3_S", 256, 110, false}},
    TypeEntry{22, {"IQ2_S", 256, 82, false}},
    TypeEntry{23, {"IQ4_XS", 256, 136, false}},
    TypeEntry{24, {"I8", 1, 1, false}},
    TypeEntry{25, {"I16", 1, 2, false}},
    TypeEntry{26, {"I32", 1, 4, false}},
    TypeEntry{27, {"I64", 1, 8, false}},
    TypeEntry{28, {"F64", 1, 8, false}},
    TypeEntry{29, {"IQ1_M", 256, 56, false}},
    TypeEntry{30, {"BF16", 1, 2, true}},
    TypeEntry{34, {"TQ1_0", 256, 54, false}},
    TypeEntry{35, {"TQ2_0", 256, 66, false}},
    TypeEntry{39, {"MXFP4", 32, 17, true}},
};

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t type_id) {
  for (const auto& entry : kTypes)
    if (entry.id == type_id) return &entry.traits;
  return nullptr;
}

std::string ggml_type_name(uint32_t type_id) {
  const GgmlTypeTraits* traits = ggml_type_traits(type_id);
  return traits ? std::string(traits->name) : "unknown type " + std::to_string(type_id);
}

std::size_t ggml_row_bytes(GgmlType type, std::uint64_t elements) {
  const auto id = static_cast<uint32_t>(type);
  const GgmlTypeTraits* traits = ggml_type_traits(id);
  if (!traits) throw Error("ggml row size: unknown type id " + std::to_string(id));
  const auto block = static_cast<std::uint64_t>(traits->block_elements);
  if (elements % block != 0)
    throw Error("ggml row size: a row of " + std::to_string(elements) + " " + traits->name +
                " values is not a whole number of blocks (expected a multiple of " + std::to_string(block) + ")");
  const std::uint64_t blocks = elements / block;
  const auto bytes_per_block = static_cast<std::uint64_t>(traits->block_bytes);
  if (blocks > std::numeric_limits<std::size_t>::max() / bytes_per_block)
    throw Error("ggml row size: a row of " + std::to_string(elements) + " " + traits->name + " values overflows");
  return static_cast<std::size_t>(blocks * bytes_per_block);
}

}  // namespace kvscope::kernels
