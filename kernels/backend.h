#pragma once
// The op set the engine runs on. The CPU versions live in kernels/cpu; the CUDA versions mirror them
// function by function in kernels/cuda, sharing the per-element math in kernels/common.
#include <vector>

#include "core/model/config.h"
#include "core/model/weights.h"

namespace kvscope::kernels {

// Y[n][W.rows] = X[n][W.cols] * W^T. Decode (n small) works on the quantized blocks directly;
// prefill dequantizes W once into a scratch buffer and uses BLAS.
void matmul(const model::QuantMatrix& w, const float* x, int n, float* y);

// Several products of the same input (q, k and v; gate and up), one parallel pass in decode.
// Every matrix must have the same number of columns.
struct MatmulTarget {
  const model::QuantMatrix* w;
  float* y;
};
void matmul_shared_input(const std::vector<MatmulTarget>& targets, const float* x, int n);

// One row of the embedding table, dequantized.
void embedding_row(const model::QuantMatrix& table, int id, float* out);

// out = x / rms(x) * weight, for one row of length dim.
void rmsnorm(const float* x, const float* weight, int dim, float eps, float* out);

// Rotates the first rope_dim dimensions of each of n_heads vectors (each head_dim long) to `position`;
// freq_divisors (rope_dim/2 values, or null for none) scale each pair's frequency down (rope scaling).
void rope(float* heads, int n_heads, int head_dim, int rope_dim, int position, float base, model::RopeStyle style,
          const float* freq_divisors = nullptr);

// x[i][j] += bias[j] for n rows of bias.size() values.
void add_bias(float* x, const std::vector<float>& bias, int n);

// sum_i a[i] * b[i], vectorized (the order of additions differs from a sequential loop).
float dot(const float* a, const float* b, int n);

// In-place numerically stable softmax over n values.
void softmax(float* x, int n);

// out[i] = silu(gate[i]) * up[i].
void swiglu(const float* gate, const float* up, float* out, int n);

}  // namespace kvscope::kernels
