#pragma once
// What a policy asks the cache to do. Policies decide, the cache applies, the recorder logs.
#include <cstdint>
#include <vector>

#include "kernels/kv_storage.h"

namespace kvscope::cache {

// Folds `sources` into the kept entry `target`: K = w[0]*K[target] + sum_i w[1+i]*K[sources[i]], V likewise.
// Indices refer to the entries before the edit; sources must not also be kept. The backend applies it
// (kernels::RowMerge, computed in float32 whatever the cache type).
using MergeGroup = kernels::RowMerge;
// Adds a share of an evicted entry's value to other entries' values, keys untouched (CaM); see
// kernels::ValueMerge. `source` must not be kept; targets are distinct and not the source.
using ValueMerge = kernels::ValueMerge;

// The edit for one (layer, KV head). Entries not in `keep` are evicted (or merged, when a source).
struct HeadEdit {
  int layer = 0;
  int kv_head = 0;
  std::vector<int32_t> keep;  // strictly increasing indices into the current entries
  std::vector<MergeGroup> merges;
  // The score the policy ranked each current entry by (empty when it has none), and a second score
  // for policies that compare two (CAOTE: the base policy's score). Recorded, never applied.
  std::vector<float> scores;
  std::vector<float> secondary_scores;
  std::vector<ValueMerge> value_merges;
};

struct CacheEdit {
  std::vector<HeadEdit> heads;
  bool empty() const { return heads.empty(); }
  void append(CacheEdit&& other) {
    for (auto& h : other.heads) heads.push_back(std::move(h));
  }
};

}  // namespace kvscope::cache
