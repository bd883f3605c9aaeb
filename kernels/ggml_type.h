#pragma once
// Tensor element types of the GGUF/ggml format, with their block geometry. They sit below the kernels (which
// read weights in these types) and the model readers (which find them in files).
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvscope::kernels {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30, MXFP4 = 39,
};

struct GgmlTypeTraits {
  const char* name;
  int block_elements;  // elements per block (1 for plain types)
  int block_bytes;     // bytes per block
  bool supported;      // kvscope can dequantize it
};

// Traits of a type id read from a file; nullptr when the id is unknown.
const GgmlTypeTraits* ggml_type_traits(uint32_t type_id);
std::string ggml_type_name(uint32_t type_id);

// Bytes of a row of `elements` values; throws Error when elements is not a whole number of blocks.
std::size_t ggml_row_bytes(GgmlType type, std::uint64_t elements);

}  // namespace kvscope::kernels
