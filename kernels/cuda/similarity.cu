#include "kernels/cuda/similarity.h"

#include <cstdint>

#include "kernels/cuda/cuda_check.h"

namespace kvscope::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kCellThreads = 128;

// A warp per row: the norm in double (as the CPU map does), then the row scaled to unit length.
__global__ void unit_rows_kernel(const float* x, int n, int d, float* unit) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= n) return;
  const float* xi = x + static_cast<int64_t>(row) * d;
  double sum = 0.0;
  for (int t = lane; t < d; t += kWarp) sum += static_cast<double>(xi[t]) * xi[t];
  for (int offset = kWarp / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float inv = sum > 0.0 ? static_cast<float>(1.0 / sqrt(sum)) : 0.0f;
  for (int t = lane; t < d; t += kWarp) unit[static_cast<int64_t>(row) * d + t] = xi[t] * inv;
}

// A thread per output cell, looping over its block of source cells.
__global__ void pooled_cells_kernel(const float* unit, int n, int d, int block, int cells, bool max_pool, float* out) {
  const int64_t cell = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (cell >= static_cast<int64_t>(cells) * cells) return;
  const int r0 = static_cast<int>(cell / cells) * block, c0 = static_cast<int>(cell % cells) * block;
  const int r1 = min(n, r0 + block), c1 = min(n, c0 + block);
  float pooled = max_pool ? -INFINITY : 0.0f;
  for (int r = r0; r < r1; ++r) {
    const float* ur = unit + static_cast<int64_t>(r) * d;
    for (int c = c0; c < c1; ++c) {
      const float* uc = unit + static_cast<int64_t>(c) * d;
      float dot = 0.0f;
      for (int t = 0; t < d; ++t) dot += ur[t] * uc[t];
      pooled = max_pool ? fmaxf(pooled, dot) : pooled + dot;
    }
  }
  out[cell] = max_pool ? pooled : pooled / static_cast<float>((r1 - r0) * (c1 - c0));
}

}  // namespace

void pooled_cosine_similarity(const float* x, int n, int d, int block, bool max_pool, float* unit_scratch, float* out,
                              cudaStream_t stream) {
  if (n <= 0 || d <= 0) return;
  if (block < 1) block = 1;
  const int rows_per_block = kCellThreads / kWarp;
  unit_rows_kernel<<<(n + rows_per_block - 1) / rows_per_block, kCellThreads, 0, stream>>>(x, n, d, unit_scratch);
  check_launch("pooled_cosine_similarity (unit rows)");
  const int cells = (n + block - 1) / block;
  const int64_t total = static_cast<int64_t>(cells) * cells;
  pooled_cells_kernel<<<static_cast<unsigned>((total + kCellThreads - 1) / kCellThreads), kCellThreads, 0, stream>>>(
      unit_scratch, n, d, block, cells, max_pool, out);
  check_launch("pooled_cosine_similarity (cells)");
}

}  // namespace kvscope::kernels::cuda
