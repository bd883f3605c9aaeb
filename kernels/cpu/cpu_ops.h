#pragma once
// The CPU backend's ops as plain functions on host memory (CpuBackend forwards to them; tests call them
// directly). kernels/cuda mirrors them function by function.
#include <span>
#include <vector>

#include "kernels/backend.h"

namespace kvscope::kernels {

// Y[n][W.rows] = X[n][W.cols] * W^T. Decode (n small) works on the quantized blocks directly;
// prefill dequantizes W once into a scratch buffer and uses BLAS.
void matmul(const QuantMatrix& w, const float* x, int n, float* y);

// Several products of the same input (q, k and v; gate and up), one parallel pass in decode.
// Every matrix must have the same number of columns.
void matmul_shared_input(std::span<const MatmulTarget> targets, const float* x, int n);

// One row of the embedding table, dequantized.
void embedding_row(const QuantMatrix& table, int id, float* out);

// out = x / rms(x) * weight, for one row of length dim.
void rmsnorm(const float* x, const float* weight, int dim, float eps, float* out);

// Rotates the first rope_dim dimensions of each of n_heads vectors (each head_dim long) to `position`;
// freq_divisors (rope_dim/2 values, or null for none) scale each pair's frequency down (rope scaling); the rotated
// dimensions are multiplied by `scale` (longrope's attention factor).
void rope(float* heads, int n_heads, int head_dim, int rope_dim, int position, float base, RopeStyle style,
          const float* freq_divisors = nullptr, float scale = 1.0f);

// x[r][j] += bias[j] for rows r < rows, j < width.
void add_bias(float* x, const float* bias, int rows, int width);

// sum_i a[i] * b[i], vectorized (the order of additions differs from a sequential loop).
float dot(const float* a, const float* b, int n);

// In-place numerically stable softmax over n values.
void softmax(float* x, int n);
// The same, returning log sum_i exp(x_i) of the input (-infinity for n = 0).
float softmax_lse(float* x, int n);

// out[i] = silu(gate[i]) * up[i].
void swiglu(const float* gate, const float* up, float* out, int n);

}  // namespace kvscope::kernels
