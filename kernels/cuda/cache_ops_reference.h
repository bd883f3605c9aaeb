#pragma once
// The host reference of cache_ops.cu: merges then compaction of one KV head's rows, by direct loops.
#include <cstdint>
#include <vector>

#include "kernels/cuda/attention_reference.h"  // HostLayerCache

namespace kvscope::kernels::cuda {

struct HostMergeGroup {
  std::vector<int32_t> members;  // the target first, then its sources
  std::vector<float> weights;    // one per member
};

// rows: [n][row_length]. Applies every merge (each group reads rows as they were before any merge), then
// returns the rows listed in keep, in order.
std::vector<float> merge_and_compact_reference(const std::vector<float>& rows, int row_length,
                                               const std::vector<HostMergeGroup>& groups,
                                               const std::vector<int32_t>& keep);

// The reference of append_rows: k, v [n][n_kv_heads][head_dim], new_positions [n], each head's rows placed after
// its current length, which grows by n.
void append_rows_reference(const std::vector<float>& k, const std::vector<float>& v,
                           const std::vector<int32_t>& new_positions, int n_kv_heads, int head_dim,
                           HostLayerCache& cache);

}  // namespace kvscope::kernels::cuda
