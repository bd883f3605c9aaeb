#include "kernels/cuda/cache_ops.h"

#include "kernels/common/merge_math.h"
#include "kernels/cuda/cuda_check.h"

namespace kvscope::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// A block per group, a thread per column: each thread reads its column of every member, then writes the
// target's column. No other group reads that target (a row is in one group at most), so in place is safe.
__global__ void merge_rows_kernel(float* rows, int row_length, DeviceMergeGroups groups) {
  const int g = blockIdx.x;
  const int first = groups.offsets[g];
  const int count = groups.offsets[g + 1] - first;
  const int32_t* members = groups.members + first;
  const float* weights = groups.weights + first;
  for (int column = threadIdx.x; column < row_length; column += blockDim.x) {
    const float merged = merged_element(rows, row_length, members, weights, count, column);
    rows[static_cast<int64_t>(members[0]) * row_length + column] = merged;
  }
}

__global__ void gather_rows_kernel(const float* src, const int32_t* index, int n_index, int row_length, float* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n_index) * row_length) return;
  const int64_t row = i / row_length, column = i % row_length;
  dst[i] = src[static_cast<int64_t>(index[row]) * row_length + column];
}

__global__ void gather_positions_kernel(const int32_t* src, const int32_t* index, int n_index, int32_t* dst) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n_index) dst[i] = src[index[i]];
}

}  // namespace

void merge_rows(float* rows, int row_length, const DeviceMergeGroups& groups, cudaStream_t stream) {
  if (groups.n_groups <= 0 || row_length <= 0) return;
  merge_rows_kernel<<<groups.n_groups, kThreads, 0, stream>>>(rows, row_length, groups);
  check_launch("merge_rows");
}

void gather_rows(const float* src, const int32_t* index, int n_index, int row_length, float* dst, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n_index) * row_length;
  if (total <= 0) return;
  gather_rows_kernel<<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      src, index, n_index, row_length, dst);
  check_launch("gather_rows");
}

void gather_positions(const int32_t* src, const int32_t* index, int n_index, int32_t* dst, cudaStream_t stream) {
  if (n_index <= 0) return;
  gather_positions_kernel<<<(n_index + kThreads - 1) / kThreads, kThreads, 0, stream>>>(src, index, n_index, dst);
  check_launch("gather_positions");
}

}  // namespace kvscope::kernels::cuda
