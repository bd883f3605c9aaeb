#pragma once
// kvpress's NonCausalAttnPress scores (from Compactor, Chari & Van Durme 2025), shared by the `non_causal_attn`
// policy and `compactor`, which scores the tokens between its sinks with them.
#include <cstdint>
#include <span>
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/policy/rope_rotation.h"

namespace kvscope::policy {

// The z-scored non-causal chunked attention of entries [first, first + count) of every KV head of `layer`:
// `queries` (count, n_heads x head_dim) are the entries' queries before RoPE (the layer input projected by q_proj,
// float64), rotated here to `positions` (count) in float32 as the engine rotates; keys and values are the cache's.
// Returns (n_kv_heads, count), row-major, z-normalised over all of it.
std::vector<double> non_causal_attention_scores(const std::vector<double>& queries, std::span<const int32_t> positions,
                                                const RopeRotation& rope, const cache::KVCache& cache, int layer,
                                                int first, int count, int n_heads, int chunk);

}  // namespace kvscope::policy
