#pragma once
// Block dequantization, shared by the CPU kernels and (later) the CUDA kernels.
#include <cstdint>

#include "kernels/ggml_type.h"

namespace kvscope::kernels {

// Writes n values of a row stored in `type` to dst. n must be a multiple of the type's block size.
// Throws Error for a type kvscope cannot dequantize.
void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n);

// IEEE half and bfloat16 to float.
float fp16_to_fp32(uint16_t h);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);

}  // namespace kvscope::kernels
