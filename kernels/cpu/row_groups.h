#pragma once
// Walks rows r0..r1 of a quantized matrix in groups of kRowGroup rows (then one smaller group for the rest),
// handing each group to Kernel::run<R>, the instruction-set-specific dot product of R rows with one input.
#include <xmmintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/model_weights.h"

namespace kvscope::kernels {

constexpr int kRowGroup = 4;

// A kernel's loads of a group's rows wait on memory unless asked for ahead: at each block it fetches the next
// group's copy of that block (`rows` rows further on), while this group computes.
inline void prefetch_next_group(const uint8_t* block, std::size_t stride, int rows) {
  _mm_prefetch(reinterpret_cast<const char*>(block + rows * stride), _MM_HINT_T0);
}

template <typename Kernel>
void dot_rows_in_groups(const QuantMatrix& w, int r0, int r1, const float* x, const float* x_block_sums, float* y) {
  static_assert(kRowGroup == 4, "the remainder cases below are written for groups of four");
  const int blocks = w.cols / 32;
  int r = r0;
  for (; r + kRowGroup <= r1; r += kRowGroup)
    Kernel::template run<kRowGroup>(w.row(r), w.row_bytes, x, x_block_sums, blocks, y + (r - r0));
  switch (r1 - r) {
    case 3: Kernel::template run<3>(w.row(r), w.row_bytes, x, x_block_sums, blocks, y + (r - r0)); break;
    case 2: Kernel::template run<2>(w.row(r), w.row_bytes, x, x_block_sums, blocks, y + (r - r0)); break;
    case 1: Kernel::template run<1>(w.row(r), w.row_bytes, x, x_block_sums, blocks, y + (r - r0)); break;
    default: break;
  }
}

}  // namespace kvscope::kernels
