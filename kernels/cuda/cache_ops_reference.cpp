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

}  // namespace kvscope::kernels::cuda
