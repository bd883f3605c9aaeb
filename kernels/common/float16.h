#pragma once
// IEEE 754 binary16 conversion. Maps are stored as half floats; HDF5 1.10 has no native half type, so the
// writer converts itself and stores the bits under a custom 16-bit float type.
#include <cstddef>
#include <cstdint>

#include "kernels/common/dequantize.h"
#include "kernels/common/quant_blocks.h"

#ifdef __F16C__
#include <immintrin.h>
#endif

namespace kvscope::trace {

// The conversions the kernels use for F16 weights (round to nearest even, NaN and infinity kept).
inline uint16_t float_to_half(float value) { return kernels::fp32_to_fp16(value); }
inline float half_to_float(uint16_t h) { return kernels::blocks::half_to_float(h); }

// n values at once; with F16C (x86-64-v3) eight per instruction, rounding the same way (nearest even).
inline void floats_to_half(const float* in, std::size_t n, uint16_t* out) {
  std::size_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) out[i] = float_to_half(in[i]);
}

}  // namespace kvscope::trace
