#pragma once
// One stored K/V row of the fixed-row cache types (f32, f16, bf16 and llama.cpp's q8_0, q4_0, q4_1 blocks), as
// bytes: how many it takes, how a float row becomes them and how they become floats again. The CPU cache
// (kernels/cpu/cpu_kv_storage.cpp) and the CUDA cache (kernels/cuda/cache_ops.cu, attention.cu) call these
// same functions, so both backends store the same bytes and read the same floats. C++17 and KVSCOPE_HD, for nvcc.
//
// A row is split into units that can be written and read independently: a block of 32 values for the block
// formats (its scales inline, quant_blocks.h), one value for f32, f16 and bf16. Multi-byte fields are
// little-endian, as in ggml.
#include <cstdint>
#include <cstring>

#include "kernels/common/block_quantize.h"
#include "kernels/common/host_device.h"
#include "kernels/common/quant_blocks.h"

namespace kvscope::kernels {

// The fixed-row cache types (kernels/kv_storage.h's CacheType without KIVI, whose rows have no fixed size).
enum class RowType : int32_t { F32, F16, BF16, Q8_0, Q4_0, Q4_1 };

KVSCOPE_HD inline bool row_type_is_block(RowType type) {
  return type == RowType::Q8_0 || type == RowType::Q4_0 || type == RowType::Q4_1;
}

// Bytes of one unit: a 32-value block with its scales, or one value.
KVSCOPE_HD inline int row_unit_bytes(RowType type) {
  switch (type) {
    case RowType::F32:
      return 4;
    case RowType::F16:
    case RowType::BF16:
      return 2;
    case RowType::Q8_0:
      return blocks::kQ8_0Bytes;
    case RowType::Q4_0:
      return blocks::kQ4_0Bytes;
    case RowType::Q4_1:
      return blocks::kQ4_1Bytes;
  }
  return 0;
}

// Values of one unit: 32 for a block format, 1 otherwise.
KVSCOPE_HD inline int row_unit_values(RowType type) {
  return row_type_is_block(type) ? blocks::kQuantBlockElements : 1;
}

// Units of a row of head_dim values (a block format needs head_dim a multiple of 32: check_cache_types).
KVSCOPE_HD inline int row_units(RowType type, int head_dim) { return head_dim / row_unit_values(type); }

KVSCOPE_HD inline int stored_row_bytes(RowType type, int head_dim) {
  return row_units(type, head_dim) * row_unit_bytes(type);
}

// Stores unit u of the float row x (head_dim values) into the stored row `row` (row_bytes bytes).
KVSCOPE_HD inline void quantize_cache_unit(RowType type, const float* x, int u, uint8_t* row) {
  uint8_t* out = row + u * row_unit_bytes(type);
  switch (type) {
    case RowType::F32:
      memcpy(out, x + u, sizeof(float));
      break;
    case RowType::F16:
      blocks::store_u16(out, blocks::float_to_half(x[u]));
      break;
    case RowType::BF16:
      blocks::store_u16(out, blocks::float_to_bf16(x[u]));
      break;
    case RowType::Q8_0:
      blocks::quantize_block_q8_0(x + u * blocks::kQuantBlockElements, out);
      break;
    case RowType::Q4_0:
      blocks::quantize_block_q4_0(x + u * blocks::kQuantBlockElements, out);
      break;
    case RowType::Q4_1:
      blocks::quantize_block_q4_1(x + u * blocks::kQuantBlockElements, out);
      break;
  }
}

// Reads unit u of a stored row back into out[0 .. row_unit_values) (the unit's own values, not the row's).
KVSCOPE_HD inline void dequantize_cache_unit(RowType type, const uint8_t* row, int u, float* out) {
  const uint8_t* in = row + u * row_unit_bytes(type);
  switch (type) {
    case RowType::F32:
      memcpy(out, in, sizeof(float));
      break;
    case RowType::F16:
      *out = blocks::half_to_float(blocks::load_u16(in));
      break;
    case RowType::BF16:
      *out = blocks::bf16_to_float(blocks::load_u16(in));
      break;
    case RowType::Q8_0:
      blocks::dequantize_block_q8_0(in, out);
      break;
    case RowType::Q4_0:
      blocks::dequantize_block_q4_0(in, out);
      break;
    case RowType::Q4_1:
      blocks::dequantize_block_q4_1(in, out);
      break;
  }
}

KVSCOPE_HD inline void quantize_cache_row(RowType type, const float* x, int head_dim, uint8_t* row) {
  for (int u = 0; u < row_units(type, head_dim); ++u) quantize_cache_unit(type, x, u, row);
}

KVSCOPE_HD inline void dequantize_cache_row(RowType type, const uint8_t* row, int head_dim, float* out) {
  const int values = row_unit_values(type);
  for (int u = 0; u < row_units(type, head_dim); ++u) dequantize_cache_unit(type, row, u, out + u * values);
}

}  // namespace kvscope::kernels
