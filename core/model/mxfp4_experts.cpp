#include "core/model/mxfp4_experts.h"

#include <cstddef>
#include <cstring>

#include "core/model/ggml_type.h"
#include "kernels/common/quant_blocks.h"

namespace kvscope::model {
namespace {

const uint64_t kCodeBytes = static_cast<uint64_t>(kernels::blocks::kMXFP4Elements) / 2;  // two E2M1 codes a byte
const auto kBlockBytes = static_cast<std::size_t>(kernels::blocks::kMXFP4Bytes);

// Bytes 0..3 of x to the even bytes of the result, for interleaving two 8-byte words.
uint64_t spread_bytes(uint64_t x) {
  x = (x | x << 16) & 0x0000FFFF0000FFFFull;
  return (x | x << 8) & 0x00FF00FF00FF00FFull;
}

}  // namespace

void Mxfp4Experts::write_ggml_block(uint64_t e, uint64_t r, uint64_t g, uint8_t* out) const {
  const uint64_t block = (e * rows + r) * groups + g;
  out[0] = scales[block];
  // transformers' byte k holds values 2k (low nibble) and 2k + 1; ggml's byte j values j and j + 16, so ggml's byte 2k
  // takes the low nibbles of bytes k and k + 8, byte 2k + 1 their high nibbles: eight bytes at once (little-endian).
  constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0Full;
  uint64_t first = 0, second = 0;  // values 0..15 and 16..31
  std::memcpy(&first, blocks + block * kCodeBytes, 8);
  std::memcpy(&second, blocks + block * kCodeBytes + 8, 8);
  const uint64_t even = (first & kLow) | (second & kLow) << 4, odd = (first >> 4 & kLow) | (second & ~kLow);
  const uint64_t bytes[2] = {spread_bytes(even & 0xFFFFFFFF) | spread_bytes(odd & 0xFFFFFFFF) << 8,
                             spread_bytes(even >> 32) | spread_bytes(odd >> 32) << 8};
  std::memcpy(out + 1, bytes, sizeof bytes);
}

void Mxfp4Experts::write_ggml_row(uint64_t e, uint64_t r, uint8_t* out) const {
  for (uint64_t g = 0; g < groups; ++g) write_ggml_block(e, r, g, out + g * kBlockBytes);
}

GgmlMxfp4Layout::GgmlMxfp4Layout(uint64_t D, uint64_t I)
    : gate_row(ggml_row_bytes(GgmlType::MXFP4, D)),
      down_row(ggml_row_bytes(GgmlType::MXFP4, I)),
      expert_bytes(2 * I * gate_row + D * down_row) {}

void write_ggml_mxfp4_experts(const Mxfp4Experts& gate_up, const Mxfp4Experts& down, uint64_t experts, uint64_t D,
                              uint64_t I, uint8_t* out) {
  const GgmlMxfp4Layout layout(D, I);
  // One task per output row of every expert: gate_up's 2I rows, then down's D rows.
  const auto rows_per_expert = static_cast<int64_t>(2 * I + D);
  const auto tasks = static_cast<int64_t>(experts) * rows_per_expert;
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < tasks; ++task) {
    const auto e = static_cast<uint64_t>(task / rows_per_expert), r = static_cast<uint64_t>(task % rows_per_expert);
    uint8_t* expert = out + e * layout.expert_bytes;
    if (r < 2 * I)  // gate_up row r is gate row r / 2 (even r) or up row r / 2 (odd r)
      gate_up.write_ggml_row(e, r, expert + ((r % 2) * I + r / 2) * layout.gate_row);
    else
      down.write_ggml_row(e, r - 2 * I, expert + 2 * I * layout.gate_row + (r - 2 * I) * layout.down_row);
  }
}

}  // namespace kvscope::model
