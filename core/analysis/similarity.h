#pragma once
// Cosine-similarity maps of a (layer, KV head)'s cached vectors (KVMerger Fig. 2 and App. Figs. 6-8):
//   Sim[i][j] = x_i . x_j / (||x_i|| ||x_j||),   0 for a zero vector,
// over post-RoPE keys (the paper's finding: neighbouring keys are similar) or values (they are not).
// Computed in row blocks with BLAS and pooled as it goes, so only O(block x n) scratch is held.
#include <cstdint>

#include "core/analysis/pooling.h"
#include "core/cache/kv_cache.h"

namespace kvscope::analysis {

// x: [n][d] row-major. max_size bounds the pooled map's edge (0 = full resolution).
Map2D cosine_similarity_map(const float* x, int n, int d, int max_size, Pooling mode);

enum class CachedVectors { Keys, Values };

// The map of one (layer, kv head) of the cache, with source_positions set when the entries are not
// the positions 0..n-1 (a cache that was already compressed).
Map2D cache_similarity_map(const cache::KVCache& cache, int layer, int kv_head, CachedVectors which, int max_size,
                           Pooling mode);

}  // namespace kvscope::analysis
