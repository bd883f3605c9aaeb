#include "kernels/cuda/cache_ops.h"

#include <algorithm>

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

// A thread per (row, head, element) of the keys and of the values; element 0 also writes the position, and
// the first n_kv_heads threads the new lengths.
__global__ void append_rows_kernel(const float* k, const float* v, const int32_t* new_positions, int n,
                                   DeviceAppendTarget t) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < t.n_kv_heads) t.lengths[i] = t.starts[i] + n;
  const int64_t per_row = static_cast<int64_t>(t.n_kv_heads) * t.head_dim;
  if (i >= n * per_row) return;
  const int row = static_cast<int>(i / per_row);
  const int g = static_cast<int>(i % per_row / t.head_dim), e = static_cast<int>(i % t.head_dim);
  const int64_t slot = static_cast<int64_t>(g) * t.capacity + t.starts[g] + row;
  t.keys[slot * t.head_dim + e] = k[i];
  t.values[slot * t.head_dim + e] = v[i];
  if (e == 0) t.positions[slot] = new_positions[row];
}

}  // namespace

void append_rows(const float* k, const float* v, const int32_t* new_positions, int n, const DeviceAppendTarget& target,
                 cudaStream_t stream) {
  const int64_t total = std::max<int64_t>(static_cast<int64_t>(n) * target.n_kv_heads * target.head_dim,
                                          target.n_kv_heads);
  if (n <= 0 || total <= 0) return;
  append_rows_kernel<<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      k, v, new_positions, n, target);
  check_launch("append_rows");
}

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
