#pragma once
// Per-block dequantization math for the ggml block formats. Everything here is a small inline function over
// raw bytes (no structs, no alignment assumptions, no standard library beyond memcpy) so that the CPU
// kernels and the CUDA kernels compile the very same code; under nvcc the functions are __host__ __device__.
// Layouts follow ggml-common.h; multi-byte fields are little-endian, as GGUF files are.
#include <cstdint>
#include <cstring>

#include "kernels/common/host_device.h"

namespace kvscope::kernels::blocks {

// Elements and bytes per block.
constexpr int kQ4_0Elements = 32, kQ4_0Bytes = 18;    // half d; uint8 qs[16]
constexpr int kQ4_1Elements = 32, kQ4_1Bytes = 20;    // half d; half m; uint8 qs[16]
constexpr int kQ5_0Elements = 32, kQ5_0Bytes = 22;    // half d; uint32 qh (fifth bits); uint8 qs[16]
constexpr int kQ8_0Elements = 32, kQ8_0Bytes = 34;    // half d; int8 qs[32]
constexpr int kQ4_KElements = 256, kQ4_KBytes = 144;  // half d; half dmin; uint8 scales[12]; uint8 qs[128]
constexpr int kQ6_KElements = 256, kQ6_KBytes = 210;  // uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d
constexpr int kMXFP4Elements = 32, kMXFP4Bytes = 17;  // uint8 e (E8M0 exponent); uint8 qs[16] (E2M1 codes)

KVSCOPE_HD inline uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

KVSCOPE_HD inline float float_from_bits(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

// IEEE binary16 to binary32, exact for every input (subnormals, infinities, NaN payloads).
KVSCOPE_HD inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1Fu) return float_from_bits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return float_from_bits(sign);
  // A subnormal half is a normal float: shift the leading one into the implicit bit.
  uint32_t biased = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --biased;
  }
  return float_from_bits(sign | (biased << 23) | ((mantissa & 0x3FFu) << 13));
}

// bfloat16 is the top half of a binary32.
KVSCOPE_HD inline float bf16_to_float(uint16_t h) { return float_from_bits(static_cast<uint32_t>(h) << 16); }

KVSCOPE_HD inline float load_half(const uint8_t* p) { return half_to_float(load_u16(p)); }

// OCP microscaling FP4 (gpt-oss, llama.cpp's MXFP4_MOE): x = e2m1(q) * 2^(e - 127), with the E2M1 values doubled
// to integers and the scale halved as ggml does (ggml_e8m0_to_fp32_half, 2^(e - 128); e < 2 gives a subnormal);
// the low nibbles hold elements 0..15, the high nibbles 16..31.
KVSCOPE_HD inline void dequantize_block_mxfp4(const uint8_t* block, float* out) {
  const int8_t kDoubledE2M1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const uint32_t e = block[0];
  const float d = float_from_bits(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  const uint8_t* qs = block + 1;
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>(kDoubledE2M1[qs[j] & 0x0F]);
    out[j + 16] = d * static_cast<float>(kDoubledE2M1[qs[j] >> 4]);
  }
}

// x = d * (q - 8), q a 4-bit value; the low nibbles hold elements 0..15, the high nibbles 16..31.
KVSCOPE_HD inline void dequantize_block_q4_0(const uint8_t* block, float* out) {
  const float d = load_half(block);
  const uint8_t* qs = block + 2;
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    out[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// x = d * q + m, q a 4-bit value, nibble order as in Q4_0.
KVSCOPE_HD inline void dequantize_block_q4_1(const uint8_t* block, float* out) {
  const float d = load_half(block);
  const float m = load_half(block + 2);
  const uint8_t* qs = block + 4;
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    out[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// x = d * (q - 16), q a 5-bit value: the low four bits in nibbles as in Q4_0, bit 4 of element j in bit j of
// qh (ggml's dequantize_row_q5_0; llama.cpp quantizes Gemma 3 270M's 640-wide rows so).
KVSCOPE_HD inline void dequantize_block_q5_0(const uint8_t* block, float* out) {
  const float d = load_half(block);
  const uint32_t qh = static_cast<uint32_t>(block[2]) | static_cast<uint32_t>(block[3]) << 8 |
                      static_cast<uint32_t>(block[4]) << 16 | static_cast<uint32_t>(block[5]) << 24;
  const uint8_t* qs = block + 6;
  for (int j = 0; j < 16; ++j) {
    const int high0 = static_cast<int>(((qh >> j) << 4) & 0x10);
    const int high1 = static_cast<int>((qh >> (j + 12)) & 0x10);
    out[j] = static_cast<float>(((qs[j] & 0x0F) | high0) - 16) * d;
    out[j + 16] = static_cast<float>(((qs[j] >> 4) | high1) - 16) * d;
  }
}

// x = d * q, q a signed byte.
KVSCOPE_HD inline void dequantize_block_q8_0(const uint8_t* block, float* out) {
  const float d = load_half(block);
  const uint8_t* qs = block + 2;
  for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<int8_t>(qs[j])) * d;
}

// Q4_K packs eight 6-bit (scale, min) pairs into 12 bytes: pairs 0..3 sit in the low 6 bits of bytes 0..7;
// pairs 4..7 take their low 4 bits from bytes 8..11 and their top 2 bits from the spare bits of bytes 0..7.
KVSCOPE_HD inline void q4_k_scale_min(int j, const uint8_t* scales, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// 256 values in 8 sub-blocks of 32: x = d * scale_s * q - dmin * min_s. Each 32 bytes of qs hold two
// sub-blocks: the low nibbles the first, the high nibbles the second.
KVSCOPE_HD inline void dequantize_block_q4_k(const uint8_t* block, float* out) {
  const float d = load_half(block);
  const float dmin = load_half(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* qs = block + 16;
  for (int pair = 0; pair < 4; ++pair) {
    uint8_t scale_lo, min_lo, scale_hi, min_hi;
    q4_k_scale_min(2 * pair, scales, &scale_lo, &min_lo);
    q4_k_scale_min(2 * pair + 1, scales, &scale_hi, &min_hi);
    const float d_lo = d * scale_lo, m_lo = dmin * min_lo;
    const float d_hi = d * scale_hi, m_hi = dmin * min_hi;
    const uint8_t* q = qs + 32 * pair;
    float* y = out + 64 * pair;
    for (int l = 0; l < 32; ++l) {
      y[l] = d_lo * static_cast<float>(q[l] & 0x0F) - m_lo;
      y[l + 32] = d_hi * static_cast<float>(q[l] >> 4) - m_hi;
    }
  }
}

// 256 values in 16 sub-blocks of 16: x = d * scale_s * (q - 32), q 6 bits split into 4 low bits (ql) and
// 2 high bits (qh). Each half of 128 values uses 64 bytes of ql and 32 bytes of qh.
KVSCOPE_HD inline void dequantize_block_q6_k(const uint8_t* block, float* out) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(block + 192);
  const float d = load_half(block + 208);
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int sub = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * static_cast<float>(scales[sub]) * static_cast<float>(q1);
      out[l + 32] = d * static_cast<float>(scales[sub + 2]) * static_cast<float>(q2);
      out[l + 64] = d * static_cast<float>(scales[sub + 4]) * static_cast<float>(q3);
      out[l + 96] = d * static_cast<float>(scales[sub + 6]) * static_cast<float>(q4);
    }
    out += 128;
    ql += 64;
    qh += 32;
    scales += 8;
  }
}

}  // namespace kvscope::kernels::blocks
