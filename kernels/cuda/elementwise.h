#pragma once
// Element-wise and row-wise CUDA ops, the device mirror of kernels/cpu/ops.cpp (same per-element math from
// kernels/common). Host references: the CPU backend's kernels::rmsnorm, rope, swiglu, add_bias, softmax.
// All pointers are device pointers; rows are contiguous.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvscope::kernels::cuda {

// out[r] = x[r] / rms(x[r]) * weight for n rows of dim values.
void rmsnorm_rows(const float* x, const float* weight, int n, int dim, float eps, float* out, cudaStream_t stream);

// Rotates the first rope_dim dimensions of each of n_heads vectors per row (rows of n_heads * head_dim values)
// to positions[r]; freq_divisors (rope_dim/2 values, device) may be null.
void rope_rows(float* x, int n, int n_heads, int head_dim, int rope_dim, const int32_t* positions, float base,
               bool adjacent_pairs, const float* freq_divisors, cudaStream_t stream);

// out[i] = silu(gate[i]) * up[i].
void swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);

// x[i] += y[i] (the residual connection).
void add_in_place(float* x, const float* y, int64_t n, cudaStream_t stream);

// x[r][j] += bias[j] for n rows of width values.
void add_bias_rows(float* x, const float* bias, int n, int width, cudaStream_t stream);

// Numerically stable softmax of each of n rows of width values, in place (sampling's distribution).
void softmax_rows(float* x, int n, int width, cudaStream_t stream);

// The index of the largest of n values (the first on ties), through CUB's DeviceReduce::ArgMax.
int argmax(const float* x, int n, cudaStream_t stream);

}  // namespace kvscope::kernels::cuda
