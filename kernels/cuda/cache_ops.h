#pragma once
// Cache edits on the device (the CUDA mirror of KVCache::apply): weighted merges of rows into a target
// row, then compaction by gathering the kept rows. Appending new rows is a plain copy (cudaMemcpyAsync).
// Host reference: cache_ops_reference.h. Device pointers throughout.
#include <cuda_runtime_api.h>

#include <cstdint>

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

}  // namespace kvscope::kernels::cuda
