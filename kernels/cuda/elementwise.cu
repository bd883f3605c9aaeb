#include "kernels/cuda/elementwise.h"

#include <cub/cub.cuh>
#include <cuda/functional>

#include "kernels/common/rope_math.h"
#include "kernels/common/softmax_math.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"

namespace kvscope::kernels::cuda {
namespace {

constexpr int kThreads = 256;
using BlockReduce = cub::BlockReduce<float, kThreads>;

unsigned grid_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// One block per row; the sum of squares is reduced in double, as the CPU kernel does.
__global__ void rmsnorm_kernel(const float* x, const float* weight, int dim, float eps, float* out) {
  using DoubleReduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename DoubleReduce::TempStorage temp;
  __shared__ float scale;
  const float* row = x + static_cast<int64_t>(blockIdx.x) * dim;
  double sum = 0.0;
  for (int i = threadIdx.x; i < dim; i += kThreads) sum += static_cast<double>(row[i]) * row[i];
  const double total = DoubleReduce(temp).Sum(sum);
  if (threadIdx.x == 0) scale = rms_inverse(total, dim, eps);
  __syncthreads();
  float* o = out + static_cast<int64_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) o[i] = row[i] * scale * weight[i];
}

// One thread per (row, head, pair).
__global__ void rope_kernel(float* x, int n, int n_heads, int head_dim, int rope_dim, const int32_t* positions,
                            float base, bool adjacent_pairs, const float* freq_divisors) {
  const int pairs = rope_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * n_heads * pairs) return;
  const int pair = static_cast<int>(i % pairs);
  const int64_t head_index = i / pairs;  // row * n_heads + head
  const int row = static_cast<int>(head_index / n_heads);
  float* v = x + head_index * head_dim;
  int first, second;
  rope_pair_indices(adjacent_pairs, pair, rope_dim, &first, &second);
  rope_rotate_pair(v[first], v[second], pair, rope_dim, positions[row], base,
                   freq_divisors ? freq_divisors[pair] : 1.0f);
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = swiglu_element(gate[i], up[i]);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void add_bias_kernel(float* x, const float* bias, int64_t n, int width) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += bias[i % width];
}

// One block per row: the maximum, then the sum of exp(x - max), each a CUB block reduction.
__global__ void softmax_kernel(float* x, int width) {
  __shared__ typename BlockReduce::TempStorage temp;
  __shared__ float row_max, row_sum;
  float* row = x + static_cast<int64_t>(blockIdx.x) * width;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < width; i += kThreads) m = fmaxf(m, row[i]);
  const float block_max = BlockReduce(temp).Reduce(m, ::cuda::maximum<float>());
  if (threadIdx.x == 0) row_max = block_max;
  __syncthreads();
  float s = 0.0f;
  for (int i = threadIdx.x; i < width; i += kThreads) {
    row[i] = expf(row[i] - row_max);
    s += row[i];
  }
  const float block_sum = BlockReduce(temp).Sum(s);
  if (threadIdx.x == 0) row_sum = block_sum;
  __syncthreads();
  const float inv = 1.0f / row_sum;
  for (int i = threadIdx.x; i < width; i += kThreads) row[i] *= inv;
}

}  // namespace

void rmsnorm_rows(const float* x, const float* weight, int n, int dim, float eps, float* out, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  rmsnorm_kernel<<<n, kThreads, 0, stream>>>(x, weight, dim, eps, out);
  check_launch("rmsnorm_rows");
}

void rope_rows(float* x, int n, int n_heads, int head_dim, int rope_dim, const int32_t* positions, float base,
               bool adjacent_pairs, const float* freq_divisors, cudaStream_t stream) {
  const int64_t threads = static_cast<int64_t>(n) * n_heads * (rope_dim / 2);
  if (threads <= 0) return;
  rope_kernel<<<grid_for(threads), kThreads, 0, stream>>>(x, n, n_heads, head_dim, rope_dim, positions, base,
                                                          adjacent_pairs, freq_divisors);
  check_launch("rope_rows");
}

void swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  if (n <= 0) return;
  swiglu_kernel<<<grid_for(n), kThreads, 0, stream>>>(gate, up, n, out);
  check_launch("swiglu");
}

void add_in_place(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  check_launch("add_in_place");
}

void add_bias_rows(float* x, const float* bias, int n, int width, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * width;
  if (total <= 0) return;
  add_bias_kernel<<<grid_for(total), kThreads, 0, stream>>>(x, bias, total, width);
  check_launch("add_bias_rows");
}

void softmax_rows(float* x, int n, int width, cudaStream_t stream) {
  if (n <= 0 || width <= 0) return;
  softmax_kernel<<<n, kThreads, 0, stream>>>(x, width);
  check_launch("softmax_rows");
}

int argmax(const float* x, int n, cudaStream_t stream) {
  if (n <= 0) throw Error("argmax of an empty vector");
  DeviceBuffer<float> max_value(1);
  DeviceBuffer<int64_t> index(1);
  std::size_t temp_bytes = 0;
  check_cuda(cub::DeviceReduce::ArgMax(nullptr, temp_bytes, x, max_value.data(), index.data(), n, stream),
             "argmax (size)");
  DeviceBuffer<unsigned char> temp(temp_bytes);
  check_cuda(cub::DeviceReduce::ArgMax(temp.data(), temp_bytes, x, max_value.data(), index.data(), n, stream),
             "argmax");
  return static_cast<int>(index.download(stream)[0]);
}

}  // namespace kvscope::kernels::cuda
