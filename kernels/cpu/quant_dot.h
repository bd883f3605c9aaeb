#pragma once
// Dot products of a quantized weight row with a float vector, without dequantizing the row first.
// Decode is bound by reading weights, so reading the 4-bit blocks directly is what makes it fast.
#include <cstdint>

namespace kvscope::kernels {

// Sum of each 32-element block of x; Q4_1's offset term m * sum(x_block) reuses it for every row.
void block_sums32(const float* x, int n, float* sums);

float dot_q4_1(const uint8_t* row, const float* x, const float* x_block_sums, int n);
float dot_q8_0(const uint8_t* row, const float* x, int n);
float dot_q4_0(const uint8_t* row, const float* x, const float* x_block_sums, int n);

}  // namespace kvscope::kernels
