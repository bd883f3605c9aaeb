#pragma once
// KIVI's per-element math (Liu et al. 2024; the layout and rules are in kernels/cpu/kivi_part.h): a group's range
// (s, z) as stored halves, a value's code, the packing of codes into bytes and one stored value read back. The CPU
// cache (kernels/cpu/kivi_part.cpp) and the CUDA cache (kernels/cuda/kivi_ops.cu, attention.cu) call these same
// functions, so both backends store the same bytes and read the same floats. C++17 and KVSCOPE_HD, for nvcc.
//
// Layouts (D = head_dim, B = bits, G = group): a key group is D half scales, D half zero points, then its entries'
// code rows of D B / 8 bytes; a value row is D / G half scales, D / G half zero points, then its code row. A code
// row packs 32 channels in 4 B bytes: byte b of a chunk holds channels b + 8 s (2 bits) or b + 16 s (4 bits) in
// slot s, slot 0 in the low bits.
#include <cmath>
#include <cstdint>

#include "kernels/common/block_quantize.h"
#include "kernels/common/host_device.h"
#include "kernels/common/quant_blocks.h"

namespace kvscope::kernels::kivi {

constexpr int kChunk = 32;  // channels a packed chunk of codes holds

// KIVI's scale and zero point of one group, as stored (halves) and as used (their float values).
struct Range {
  uint16_t scale_bits, zero_bits;
  float scale, zero;
};

// min and max as std::min / std::max take them (the first value kept on a tie or a NaN).
KVSCOPE_HD inline void extend(float& lo, float& hi, float x) {
  lo = x < lo ? x : lo;
  hi = hi < x ? x : hi;
}

// z = lo, s = (hi - lo) / (2^B - 1), both rounded to halves.
KVSCOPE_HD inline Range range_from(float lo, float hi, int bits) {
  Range r{};
  r.scale_bits = blocks::float_to_half((hi - lo) / static_cast<float>((1 << bits) - 1));
  r.zero_bits = blocks::float_to_half(lo);
  r.scale = blocks::half_to_float(r.scale_bits);
  r.zero = blocks::half_to_float(r.zero_bits);
  return r;
}

// The range of x[0], x[stride], ..., x[(n - 1) stride].
KVSCOPE_HD inline Range range_of(const float* x, int n, int stride, int bits) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) extend(lo, hi, x[i * stride]);
  return range_from(lo, hi, bits);
}

// Q(x) = clamp(round((x - z) / s), 0, 2^B - 1), rounding half to even; a constant group (s = 0) codes 0.
KVSCOPE_HD inline uint8_t code_of(float x, const Range& r, int bits) {
  if (!(r.scale > 0.0f)) return 0;
  const float q = rintf((x - r.zero) / r.scale);
  if (!(q > 0.0f)) return 0;
  const float top = static_cast<float>((1 << bits) - 1);
  return static_cast<uint8_t>(q < top ? q : top);
}

// x' = Q s + z. Q s is exact in float (4 + 11 bits), so a fused multiply-add gives the same value.
KVSCOPE_HD inline float value_of(uint8_t code, float scale, float zero) {
  return static_cast<float>(code) * scale + zero;
}

KVSCOPE_HD inline int code_row_bytes(int head_dim, int bits) { return head_dim * bits / 8; }
// Bytes of one chunk of 32 codes.
KVSCOPE_HD inline int chunk_bytes(int bits) { return 4 * bits; }
// Codes one byte holds.
KVSCOPE_HD inline int byte_slots(int bits) { return 8 / bits; }
// The channel in slot `slot` of byte `byte` of a code row.
KVSCOPE_HD inline int byte_channel(int byte, int slot, int bits) {
  const int per_chunk = chunk_bytes(bits);
  return byte / per_chunk * kChunk + byte % per_chunk + per_chunk * slot;
}
// Channel c's code in a code row.
KVSCOPE_HD inline uint8_t code_at(const uint8_t* code_row, int c, int bits) {
  const int per_chunk = chunk_bytes(bits), w = c % kChunk;
  const uint8_t byte = code_row[c / kChunk * per_chunk + w % per_chunk];
  return static_cast<uint8_t>((byte >> (bits * (w / per_chunk))) & ((1 << bits) - 1));
}
// Byte `byte` of a code row from the channels' codes, code(channel) a callable.
template <class CodeOf>
KVSCOPE_HD inline uint8_t packed_byte(int byte, int bits, CodeOf code) {
  unsigned out = 0;
  for (int s = 0; s < byte_slots(bits); ++s)
    out |= static_cast<unsigned>(code(byte_channel(byte, s, bits))) << (bits * s);
  return static_cast<uint8_t>(out);
}

// Key groups: bytes of the scales and zero points, and where each field lies.
KVSCOPE_HD inline int key_meta_bytes(int head_dim) { return 4 * head_dim; }
KVSCOPE_HD inline void store_key_range(uint8_t* group, int head_dim, int c, const Range& r) {
  blocks::store_u16(group + 2 * c, r.scale_bits);
  blocks::store_u16(group + 2 * (head_dim + c), r.zero_bits);
}
// Entry j's channel c of a key group, read back.
KVSCOPE_HD inline float key_value(const uint8_t* group, int head_dim, int bits, int j, int c) {
  const uint8_t* codes = group + key_meta_bytes(head_dim) + j * code_row_bytes(head_dim, bits);
  return value_of(code_at(codes, c, bits), blocks::load_half(group + 2 * c),
                  blocks::load_half(group + 2 * (head_dim + c)));
}

// Value rows: bytes of a row, its scales and zero points, and channel c read back.
KVSCOPE_HD inline int value_meta_bytes(int head_dim, int group) { return 4 * (head_dim / group); }
KVSCOPE_HD inline int value_row_bytes(int head_dim, int group, int bits) {
  return value_meta_bytes(head_dim, group) + code_row_bytes(head_dim, bits);
}
KVSCOPE_HD inline void store_value_range(uint8_t* row, int head_dim, int group, int k, const Range& r) {
  blocks::store_u16(row + 2 * k, r.scale_bits);
  blocks::store_u16(row + 2 * (head_dim / group + k), r.zero_bits);
}
KVSCOPE_HD inline float value_value(const uint8_t* row, int head_dim, int group, int bits, int c) {
  const int groups = head_dim / group, k = c / group;
  return value_of(code_at(row + value_meta_bytes(head_dim, group), c, bits), blocks::load_half(row + 2 * k),
                  blocks::load_half(row + 2 * (groups + k)));
}

}  // namespace kvscope::kernels::kivi
