#pragma once
// What a policy asks the cache to do. Policies decide, the cache applies, the recorder logs.
#include <cstdint>
#include <vector>

namespace kvscope::cache {

// Folds `sources` into the kept entry `target`: K = w[0]*K[target] + sum_i w[1+i]*K[sources[i]], V likewise.
// Indices refer to the entries before the edit; sources must not also be kept.
struct MergeGroup {
  int32_t target = 0;
  std::vector<int32_t> sources;
  std::vector<float> weights;  // 1 + sources.size() values, finite, summing to 1
};

// Adds a share of an evicted entry's value to other entries' values, leaving every key alone (CaM: keys are
// evicted, values merged): V[t] += weight * V[source] for each t in targets. Applied in list order before the
// merge groups, so a later source carries what earlier ones gave it. `source` must not be kept.
struct ValueMerge {
  int32_t source = 0;
  std::vector<int32_t> targets;
  float weight = 0.0f;
};

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
