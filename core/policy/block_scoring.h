#pragma once
// kvpress BlockPress(press, block_size): the prompt runs in one exact forward pass; then each layer's entries are
// scored block by block: the first `budget` entries are kept, and each next `block` entries are scored together with
// the kept ones (the scorer sees only those), the best `budget` kept. A score that depends on the other entries
// (KeyDiff's mean key, a window's softmax) then differs from one pass over everything. What the scorer sees of each
// subset, as BlockPress gives its press: per KV head its entries (keys, values, positions), the kept ones in the order
// their scores ranked them, then the block's;
// `hidden_states` row j made of each KV head's hidden / n_kv_heads slice of the row of that head's j-th entry
// (BlockPress's gather); queries, queries and keys before RoPE, the rows of each head's own entries;
// `query_positions` KV head 0's entries'. No attention reductions (BlockPress refuses attention weights).
#include <cstdint>
#include <functional>
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/observation/attention_observation.h"

namespace kvscope::policy {

// The ranking of every entry of (subset observation's layer, kv_head) in `cache`, higher kept. Every head of that cache
// holds kv_head's entries (in its order); only kv_head's ranking is used.
using SubsetRanking = std::function<std::vector<double>(const observation::AttentionObservation& subset, int kv_head,
                                                        cache::KVCache& cache)>;

// Per KV head, the entries (indices into the layer's cache, ascending) BlockPress keeps: `budget` of the layer's
// entries of `cache`, scored in blocks of `block` by `rank` on each subset. `obs` is the layer's one-pass prefill
// observation. Ties rank the entry first in the subset's order first.
std::vector<std::vector<int32_t>> block_scored_keep(const observation::AttentionObservation& obs,
                                                    const cache::KVCache& cache, int budget, int block,
                                                    const SubsetRanking& rank);

// kvpress ChunkPress(press, chunk_length): per KV head, the entries ChunkPress keeps of the layer of `cache`: cut into
// chunks of `chunk` from the first (the last may be shorter), each scored alone by `rank` (the scorer sees the chunk's
// entries in every KV head and the observation's rows of those entries, as ChunkPress slices them for its press) and
// keeping its max(1, int(len * kept_share)) best (ties: the earlier entry). `obs` is the layer's one-pass prefill
// observation.
std::vector<std::vector<int32_t>> chunk_scored_keep(const observation::AttentionObservation& obs,
                                                    const cache::KVCache& cache, int chunk, double kept_share,
                                                    const SubsetRanking& rank);

}  // namespace kvscope::policy
