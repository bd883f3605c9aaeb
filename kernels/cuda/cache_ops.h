#pragma once
// Cache edits on the device (the CUDA mirror of KVCache::apply): weighted merges of rows into a target
// row, then compaction by gathering the kept rows, and appending new rows to every KV head of a layer in one launch.
// The stored-row kernels (append_stored_rows and below) do the same for a cache of any fixed-row type (f16, bf16,
// q8_0, q4_0, q4_1, or a mix with f32), quantizing with kernels/common/cache_rows.h, the CPU cache's own functions.
// Host reference: cache_ops_reference.h. Device pointers throughout.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/cache_rows.h"

namespace kvscope::kernels::cuda {

// Merge groups in CSR form: group i has members[offsets[i] .. offsets[i+1]) (the target first, then its
// sources) with one weight each. rows[target] = sum_m weight_m * rows[member_m] (kernels/common/merge_math.h).
// A row may belong to one group only (the cache validates edits before they reach a backend).
struct DeviceMergeGroups {
  const int32_t* offsets = nullptr;  // [n_groups + 1]
  const int32_t* members = nullptr;  // [offsets[n_groups]]
  const float* weights = nullptr;    // [offsets[n_groups]]
  int n_groups = 0;
};

void merge_rows(float* rows, int row_length, const DeviceMergeGroups& groups, cudaStream_t stream);

// dst[i] = src[index[i]] for n_index rows of row_length values (src and dst must not overlap).
void gather_rows(const float* src, const int32_t* index, int n_index, int row_length, float* dst, cudaStream_t stream);
void gather_positions(const int32_t* src, const int32_t* index, int n_index, int32_t* dst, cudaStream_t stream);

// One layer's cache as append_rows writes it: [n_kv_heads][capacity][head_dim] rows, [n_kv_heads][capacity]
// positions, [n_kv_heads] lengths; starts[g] is head g's length before the append (the host knows it, so no
// thread reads a length another writes).
constexpr int kMaxAppendHeads = 64;
struct DeviceAppendTarget {
  float* keys = nullptr;
  float* values = nullptr;
  int32_t* positions = nullptr;
  int32_t* lengths = nullptr;
  int capacity = 0, n_kv_heads = 0, head_dim = 0;
  int starts[kMaxAppendHeads] = {};
};

// Appends n rows per KV head: k and v are [n][n_kv_heads][head_dim] (as the projections write them),
// new_positions [n] on the device; head g's rows go to starts[g] .. starts[g] + n, and lengths[g] becomes
// starts[g] + n. One launch instead of a strided copy per head and part (an append runs in every layer of every
// decode step, where each launch's latency counts). The caller guarantees starts[g] + n <= capacity.
void append_rows(const float* k, const float* v, const int32_t* new_positions, int n, const DeviceAppendTarget& target,
                 cudaStream_t stream);

// One layer's cache of stored rows (kernels/common/cache_rows.h) as append_stored_rows writes it: keys
// [n_kv_heads][capacity][stored_row_bytes(key_type)], values likewise, positions, lengths and starts as in
// DeviceAppendTarget. error_sums, when set, receives sum (x - x')^2 and sum x^2 over the appended values that a
// non-f32 part stored ([keys error, keys reference, values error, values reference], added with atomics).
struct DeviceStoredAppendTarget {
  uint8_t* keys = nullptr;
  uint8_t* values = nullptr;
  int32_t* positions = nullptr;
  int32_t* lengths = nullptr;
  RowType key_type = RowType::F32, value_type = RowType::F32;
  int capacity = 0, n_kv_heads = 0, head_dim = 0;
  int starts[kMaxAppendHeads] = {};
  double* error_sums = nullptr;
};

// append_rows for stored rows: a thread per (row, head, unit) quantizes one 32-value block (or one value of a
// float type) of the key and of the value; each row is quantized once, straight from the projections' output.
void append_stored_rows(const float* k, const float* v, const int32_t* new_positions, int n,
                        const DeviceStoredAppendTarget& target, cudaStream_t stream);

// out[i] = rows[index[i]] read back as float [n][head_dim] (the rows a merge involves).
void dequantize_stored_rows(const uint8_t* rows, RowType type, int head_dim, const int32_t* index, int n, float* out,
                            cudaStream_t stream);

// rows[index[i]] = float row src_slots[i] of src ([*][head_dim]) stored in `type` (a merged row, quantized once);
// error_sums, when set, receives [sum (x - x')^2, sum x^2] of those rows (nothing for f32).
void quantize_stored_rows(const float* src, const int32_t* src_slots, const int32_t* index, int n, RowType type,
                          int head_dim, uint8_t* rows, double* error_sums, cudaStream_t stream);

// dst[i] = src[index[i]] for rows of row_bytes bytes: compaction moves a block row whole, scales with it.
void gather_stored_rows(const uint8_t* src, const int32_t* index, int n_index, int row_bytes, uint8_t* dst,
                        cudaStream_t stream);

}  // namespace kvscope::kernels::cuda
