#include "core/engine/sliding_window.h"

#include <algorithm>

namespace kvscope::engine {

cache::CacheEdit window_trim(const cache::KVCache& cache, int layer, int first_kept) {
  cache::CacheEdit edit;
  for (int h = 0; h < cache.n_kv_heads(); ++h) {
    const auto positions = cache.positions(layer, h);
    // Entries are ordered by position: the kept ones are a suffix.
    const int first =
        static_cast<int>(std::lower_bound(positions.begin(), positions.end(), first_kept) - positions.begin());
    if (first == 0) continue;
    cache::HeadEdit head;
    head.layer = layer;
    head.kv_head = h;
    for (int i = first; i < static_cast<int>(positions.size()); ++i) head.keep.push_back(i);
    edit.heads.push_back(std::move(head));
  }
  return edit;
}

}  // namespace kvscope::engine
