#pragma once
// IEEE 754 binary16 conversion of whole rows: the f16 KV cache (kernels/cpu) stores keys and values this way, and
// the trace writer stores maps as half floats (HDF5 1.10 has no native half type); bfloat16 rows for the bf16
// KV cache.
#include <cstddef>
#include <cstdint>

#include "kernels/common/block_quantize.h"
#include "kernels/common/dequantize.h"
#include "kernels/common/quant_blocks.h"

#ifdef __F16C__
#include <immintrin.h>
#endif

namespace kvscope::kernels {

// The conversions the kernels use for F16 weights (round to nearest even, NaN and infinity kept).
inline uint16_t float_to_half(float value) { return fp32_to_fp16(value); }
inline float half_to_float(uint16_t h) { return blocks::half_to_float(h); }

// n values at once; with F16C (x86-64-v3) eight per instruction, rounding the same way (nearest even).
inline void floats_to_half(const float* in, std::size_t n, uint16_t* out) {
  std::size_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) out[i] = float_to_half(in[i]);
}

// The way back, exact (every half is a float).
inline void halves_to_float(const uint16_t* in, std::size_t n, float* out) {
  std::size_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
#endif
  for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

// A bfloat16 value (the top 16 bits of a binary32), a type of its own so that rows of it are not taken for IEEE
// halves.
struct BFloat16 {
  uint16_t bits;
};

inline void floats_to_bf16(const float* in, std::size_t n, BFloat16* out) {
  for (std::size_t i = 0; i < n; ++i) out[i].bits = blocks::float_to_bf16(in[i]);
}

inline void bf16s_to_float(const BFloat16* in, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = blocks::bf16_to_float(in[i].bits);
}

}  // namespace kvscope::kernels
