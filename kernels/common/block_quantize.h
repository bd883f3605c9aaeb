#pragma once
// Quantization of one 32-value block into the ggml block formats the quantized KV cache stores (q8_0, q4_0,
// q4_1), the inverse of quant_blocks.h's dequantize_block_*. The bytes equal llama.cpp's reference quantizers
// (ggml-quants.c, quantize_row_*_ref) as the `gguf` Python package restates them (gguf/quants.py), which
// tests/python/test_block_quant.py checks byte for byte. Layouts: quant_blocks.h.
//
// Rounding is spelled out so that a compiler cannot change it: with FMA available, `x * id + 8.5f` may be
// contracted into one fused operation (GCC does so by default outside strict ISO mode, nvcc always), which
// rounds once instead of twice and moves a value that lands on a code boundary one code down (ggml's reference
// rounds the product to float first). Spelling the product as a product of doubles is not enough: GCC folds it
// back into a float multiply and then fuses that. The product therefore passes through a volatile float on the
// host and __fmul_rn (never contracted) on the device.
#include <cmath>
#include <cstdint>

#include "kernels/common/host_device.h"
#include "kernels/common/quant_blocks.h"

namespace kvscope::kernels::blocks {

constexpr int kQuantBlockElements = 32;

KVSCOPE_HD inline void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

KVSCOPE_HD inline uint32_t float_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

// binary32 to binary16: round to nearest, ties to even; overflow goes to infinity, NaN stays a (quiet) NaN.
KVSCOPE_HD inline uint16_t float_to_half(float f) {
  const uint32_t bits = float_bits(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 rounds past 65504
  if (magnitude >= 0x38800000u) {                                               // normal half (>= 2^-14)
    const uint32_t rebiased = magnitude - 0x38000000u;                          // exponent bias 127 -> 15
    uint32_t half = rebiased >> 13;
    const uint32_t rest = rebiased & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry into the exponent is correct
    return static_cast<uint16_t>(sign | half);
  }
  if (magnitude <= 0x33000000u) return sign;  // <= 2^-25: rounds (ties to even) to zero
  // Subnormal half: count units of 2^-24.
  const uint32_t exponent = magnitude >> 23;
  const uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14..24
  uint32_t half = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

// binary32 to bfloat16 (its top half): round to nearest, ties to even; NaN stays a quiet NaN
// (ggml_compute_fp32_to_bf16).
KVSCOPE_HD inline uint16_t float_to_bf16(float f) {
  const uint32_t bits = float_bits(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 64u);
  return static_cast<uint16_t>((bits + (0x7FFFu + ((bits >> 16) & 1u))) >> 16);
}

// a * b rounded to float once, never fused with a following addition (see the top of the file).
KVSCOPE_HD inline float product(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  const volatile float rounded = a * b;
  return rounded;
#endif
}

// A 4-bit code from a value already offset into [0, 16]: truncation toward zero, at most 15.
KVSCOPE_HD inline uint8_t nibble(float offset_value) {
  const int q = static_cast<int>(offset_value);
  return static_cast<uint8_t>(q < 0 ? 0 : (q > 15 ? 15 : q));
}

// q8_0: d = max|x| / 127, q = round(x / d) (half away from zero), x ~ d * q.
KVSCOPE_HD inline void quantize_block_q8_0(const float* x, uint8_t* block) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(block, float_to_half(d));
  for (int j = 0; j < 32; ++j) block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(roundf(x[j] * id)));
}

// q4_0: the value of largest magnitude (the first, on a tie) maps to -8: d = max / -8, q = trunc(x / d + 8.5)
// capped at 15, x ~ d * (q - 8). Elements 0..15 in the low nibbles, 16..31 in the high ones.
KVSCOPE_HD inline void quantize_block_q4_0(const float* x, uint8_t* block) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(block, float_to_half(d));
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = nibble(product(x[j], id) + 8.5f);
    const uint8_t hi = nibble(product(x[j + 16], id) + 8.5f);
    block[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// q4_1: d = (max - min) / 15, m = min, q = trunc((x - min) / d + 0.5) capped at 15, x ~ d * q + m.
KVSCOPE_HD inline void quantize_block_q4_1(const float* x, uint8_t* block) {
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = fminf(min, x[j]);
    max = fmaxf(max, x[j]);
  }
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(block, float_to_half(d));
  store_u16(block + 2, float_to_half(min));
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = nibble(product(x[j] - min, id) + 0.5f);
    const uint8_t hi = nibble(product(x[j + 16] - min, id) + 0.5f);
    block[4 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

}  // namespace kvscope::kernels::blocks
