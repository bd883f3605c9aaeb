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

// Adds (x - x')^2 and x^2 of unit u of row x, stored in `stored`, to sums[0] and sums[1] (the CPU cache's
// StorageError::add over the same values).
__device__ void add_unit_error(RowType type, const float* x, int u, const uint8_t* stored, double* sums) {
  float back[blocks::kQuantBlockElements];
  dequantize_cache_unit(type, stored, u, back);
  const int values = row_unit_values(type);
  for (int e = 0; e < values; ++e) {
    const double original = x[u * values + e];
    const double d = original - back[e];
    sums[0] += d * d;
    sums[1] += original * original;
  }
}

// Sums each of `count` values over the warp and adds lane 0's totals to `target` (every lane must call it).
__device__ void warp_add(double* sums, int count, double* target) {
  for (int c = 0; c < count; ++c) {
    double v = sums[c];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0 && v != 0.0) atomicAdd(target + c, v);
  }
}

__global__ void append_stored_rows_kernel(const float* k, const float* v, const int32_t* new_positions, int n,
                                          DeviceStoredAppendTarget t) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < t.n_kv_heads) t.lengths[i] = t.starts[i] + n;
  const int units_k = row_units(t.key_type, t.head_dim), units_v = row_units(t.value_type, t.head_dim);
  const int units = max(units_k, units_v);
  const int64_t per_row = static_cast<int64_t>(t.n_kv_heads) * units;
  double sums[4] = {};
  if (i < n * per_row) {
    const int row = static_cast<int>(i / per_row);
    const int g = static_cast<int>(i % per_row / units), u = static_cast<int>(i % units);
    const int64_t slot = static_cast<int64_t>(g) * t.capacity + t.starts[g] + row;
    const int64_t source = (static_cast<int64_t>(row) * t.n_kv_heads + g) * t.head_dim;
    if (u < units_k) {
      uint8_t* dst = t.keys + slot * stored_row_bytes(t.key_type, t.head_dim);
      quantize_cache_unit(t.key_type, k + source, u, dst);
      if (t.key_type != RowType::F32) add_unit_error(t.key_type, k + source, u, dst, sums);
    }
    if (u < units_v) {
      uint8_t* dst = t.values + slot * stored_row_bytes(t.value_type, t.head_dim);
      quantize_cache_unit(t.value_type, v + source, u, dst);
      if (t.value_type != RowType::F32) add_unit_error(t.value_type, v + source, u, dst, sums + 2);
    }
    if (u == 0) t.positions[slot] = new_positions[row];
  }
  if (t.error_sums) warp_add(sums, 4, t.error_sums);
}

__global__ void dequantize_stored_rows_kernel(const uint8_t* rows, RowType type, int head_dim, const int32_t* index,
                                              int n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int units = row_units(type, head_dim);
  if (i >= static_cast<int64_t>(n) * units) return;
  const int r = static_cast<int>(i / units), u = static_cast<int>(i % units);
  dequantize_cache_unit(type, rows + static_cast<int64_t>(index[r]) * stored_row_bytes(type, head_dim), u,
                        out + static_cast<int64_t>(r) * head_dim + u * row_unit_values(type));
}

__global__ void quantize_stored_rows_kernel(const float* src, const int32_t* src_slots, const int32_t* index, int n,
                                            RowType type, int head_dim, uint8_t* rows, double* error_sums) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int units = row_units(type, head_dim);
  double sums[2] = {};
  if (i < static_cast<int64_t>(n) * units) {
    const int r = static_cast<int>(i / units), u = static_cast<int>(i % units);
    const float* x = src + static_cast<int64_t>(src_slots[r]) * head_dim;
    uint8_t* dst = rows + static_cast<int64_t>(index[r]) * stored_row_bytes(type, head_dim);
    quantize_cache_unit(type, x, u, dst);
    if (type != RowType::F32) add_unit_error(type, x, u, dst, sums);
  }
  if (error_sums) warp_add(sums, 2, error_sums);
}

__global__ void gather_stored_rows_kernel(const uint8_t* src, const int32_t* index, int n_index, int row_bytes,
                                          uint8_t* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n_index) * row_bytes) return;
  const int64_t row = i / row_bytes, byte = i % row_bytes;
  dst[i] = src[static_cast<int64_t>(index[row]) * row_bytes + byte];
}

unsigned blocks_for(int64_t total) { return static_cast<unsigned>((total + kThreads - 1) / kThreads); }

}  // namespace

void append_stored_rows(const float* k, const float* v, const int32_t* new_positions, int n,
                        const DeviceStoredAppendTarget& target, cudaStream_t stream) {
  const int units =
      std::max(row_units(target.key_type, target.head_dim), row_units(target.value_type, target.head_dim));
  const int64_t total = std::max<int64_t>(static_cast<int64_t>(n) * target.n_kv_heads * units, target.n_kv_heads);
  if (n <= 0 || total <= 0) return;
  append_stored_rows_kernel<<<blocks_for(total), kThreads, 0, stream>>>(k, v, new_positions, n, target);
  check_launch("append_stored_rows");
}

void dequantize_stored_rows(const uint8_t* rows, RowType type, int head_dim, const int32_t* index, int n, float* out,
                            cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * row_units(type, head_dim);
  if (total <= 0) return;
  dequantize_stored_rows_kernel<<<blocks_for(total), kThreads, 0, stream>>>(rows, type, head_dim, index, n, out);
  check_launch("dequantize_stored_rows");
}

void quantize_stored_rows(const float* src, const int32_t* src_slots, const int32_t* index, int n, RowType type,
                          int head_dim, uint8_t* rows, double* error_sums, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * row_units(type, head_dim);
  if (total <= 0) return;
  quantize_stored_rows_kernel<<<blocks_for(total), kThreads, 0, stream>>>(src, src_slots, index, n, type, head_dim,
                                                                          rows, error_sums);
  check_launch("quantize_stored_rows");
}

void gather_stored_rows(const uint8_t* src, const int32_t* index, int n_index, int row_bytes, uint8_t* dst,
                        cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n_index) * row_bytes;
  if (total <= 0) return;
  gather_stored_rows_kernel<<<blocks_for(total), kThreads, 0, stream>>>(src, index, n_index, row_bytes, dst);
  check_launch("gather_stored_rows");
}

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
