#include "kernels/common/dequantize.h"

#include <cstring>
#include <string>

#include "kernels/error.h"
#include "kernels/common/block_quantize.h"
#include "kernels/common/quant_blocks.h"

namespace kvscope::kernels {
namespace {

using BlockFn = void (*)(const uint8_t*, float*);

void dequantize_blocks(BlockFn fn, int block_elements, int block_bytes, const uint8_t* src, float* dst,
                       int64_t n) {
  for (int64_t i = 0; i < n / block_elements; ++i) fn(src + i * block_bytes, dst + i * block_elements);
}

}  // namespace

float fp16_to_fp32(uint16_t h) { return blocks::half_to_float(h); }

float bf16_to_fp32(uint16_t h) { return blocks::bf16_to_float(h); }

// Round to nearest, ties to even; overflow goes to infinity, NaN stays a (quiet) NaN.
uint16_t fp32_to_fp16(float f) { return blocks::float_to_half(f); }

void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  const GgmlTypeTraits* traits = ggml_type_traits(static_cast<uint32_t>(type));
  const std::string name = ggml_type_name(static_cast<uint32_t>(type));
  if (!traits || !traits->supported) throw Error("dequantize: type " + name + " is not supported by kvscope");
  if (n < 0 || n % traits->block_elements != 0)
    throw Error("dequantize: row length " + std::to_string(n) + " is not a whole number of " + name +
                " blocks (expected a non-negative multiple of " + std::to_string(traits->block_elements) + ")");
  switch (type) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = blocks::half_to_float(blocks::load_u16(src + 2 * i));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = blocks::bf16_to_float(blocks::load_u16(src + 2 * i));
      return;
    case GgmlType::Q4_0:
      return dequantize_blocks(blocks::dequantize_block_q4_0, blocks::kQ4_0Elements, blocks::kQ4_0Bytes, src, dst, n);
    case GgmlType::Q4_1:
      return dequantize_blocks(blocks::dequantize_block_q4_1, blocks::kQ4_1Elements, blocks::kQ4_1Bytes, src, dst, n);
    case GgmlType::Q5_0:
      return dequantize_blocks(blocks::dequantize_block_q5_0, blocks::kQ5_0Elements, blocks::kQ5_0Bytes, src, dst, n);
    case GgmlType::Q8_0:
      return dequantize_blocks(blocks::dequantize_block_q8_0, blocks::kQ8_0Elements, blocks::kQ8_0Bytes, src, dst, n);
    case GgmlType::Q4_K:
      return dequantize_blocks(blocks::dequantize_block_q4_k, blocks::kQ4_KElements, blocks::kQ4_KBytes, src, dst, n);
    case GgmlType::Q6_K:
      return dequantize_blocks(blocks::dequantize_block_q6_k, blocks::kQ6_KElements, blocks::kQ6_KBytes, src, dst, n);
    case GgmlType::MXFP4:
      return dequantize_blocks(blocks::dequantize_block_mxfp4, blocks::kMXFP4Elements, blocks::kMXFP4Bytes, src, dst,
                               n);
    default:
      throw Error("dequantize: type " + name + " is marked supported but has no dequantizer");
  }
}

}  // namespace kvscope::kernels
