#include "kernels/cuda/cache_ops_reference.h"

namespace kvscope::kernels::cuda {

std::vector<float> merge_and_compact_reference(const std::vector<float>& rows, int row_length,
                                               const std::vector<HostMergeGroup>& groups,
                                               const std::vector<int32_t>& keep) {
  std::vector<float> merged = rows;
  for (const HostMergeGroup& g : groups)
    for (int c = 0; c < row_length; ++c) {
      double sum = 0.0;
      for (std::size_t m = 0; m < g.members.size(); ++m)
        sum += static_cast<double>(g.weights[m]) * rows[static_cast<std::size_t>(g.members[m]) * row_length + c];
      merged[static_cast<std::size_t>(g.members[0]) * row_length + c] = static_cast<float>(sum);
    }
  std::vector<float> out;
  out.reserve(keep.size() * row_length);
  for (int32_t k : keep)
    out.insert(out.end(), merged.begin() + static_cast<std::ptrdiff_t>(k) * row_length,
               merged.begin() + static_cast<std::ptrdiff_t>(k + 1) * row_length);
  return out;
}

void append_rows_reference(const std::vector<float>& k, const std::vector<float>& v,
                           const std::vector<int32_t>& new_positions, int n_kv_heads, int head_dim,
                           HostLayerCache& cache) {
  const int n = static_cast<int>(new_positions.size()), d = head_dim;
  for (int g = 0; g < n_kv_heads; ++g) {
    for (int row = 0; row < n; ++row) {
      const std::size_t slot = static_cast<std::size_t>(g) * cache.capacity + cache.lengths[g] + row;
      const std::size_t source = (static_cast<std::size_t>(row) * n_kv_heads + g) * d;
      for (int e = 0; e < d; ++e) {
        cache.keys[slot * d + e] = k[source + e];
        cache.values[slot * d + e] = v[source + e];
      }
      cache.positions[slot] = new_positions[row];
    }
    cache.lengths[g] += n;
  }
}

}  // namespace kvscope::kernels::cuda
