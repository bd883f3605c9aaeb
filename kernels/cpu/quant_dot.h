#pragma once
// Dot products of quantized weight rows with a float vector, without dequantizing the rows first.
// Decode is bound by reading weights: the kernels walk four rows at once (each block of x is loaded once for
// four rows) and prefetch the next four rows' blocks, so the memory system streams while the cores convert.
// The arithmetic is exact float arithmetic on the dequantized values; only the order of additions differs
// from a plain loop.
#include <cstdint>

#include "kernels/model_weights.h"

namespace kvscope::kernels {

// Instruction sets the kernels are written for; the widest the CPU has is used (quant_dot_isa()).
enum class DotIsa { Avx2, Avx512 };
DotIsa quant_dot_isa();
const char* dot_isa_name(DotIsa isa);

// Whether quant_dot_rows handles this matrix (Q4_0, Q4_1 or Q8_0 with whole 32-element blocks per row).
bool has_quant_dot(const QuantMatrix& w);

// Sum of each 32-element block of x; the offset terms (Q4_1's m * sum(x_block), Q4_0's -8 d * sum(x_block))
// reuse it for every row.
void block_sums32(const float* x, int n, float* sums);

// y[r - r0] = row r of w times x, for r0 <= r < r1; x_block_sums from block_sums32(x, w.cols).
void quant_dot_rows(const QuantMatrix& w, int r0, int r1, const float* x, const float* x_block_sums, float* y);
// The same with a chosen instruction set (tests compare them; the CPU must have it).
void quant_dot_rows(DotIsa isa, const QuantMatrix& w, int r0, int r1, const float* x, const float* x_block_sums,
                    float* y);

namespace avx2 {
void quant_dot_rows(const QuantMatrix& w, int r0, int r1, const float* x, const float* x_block_sums, float* y);
}
namespace avx512 {
void quant_dot_rows(const QuantMatrix& w, int r0, int r1, const float* x, const float* x_block_sums, float* y);
}

}  // namespace kvscope::kernels
