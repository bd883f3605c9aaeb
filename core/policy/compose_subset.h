#pragma once
// What kvpress's ComposedPress hands its second press: only the entries the first press kept, in the order the
// first's scores.topk returned them, while the hidden states (and so the queries a press computes from them) stay the
// layer's. An attention-based second press recomputes attention over those keys, as
// SnapKVPress.compute_window_attention does: the queries against the k kept keys, q.k / sqrt(head_dim), query i of the
// step's n seeing the first k - n + i + 1 of them (kvpress's causal mask, applied by index in the handed-on order),
// softmax over those. ScoredPolicy::chain scores a second policy that reads attention on this view (docs/policies.md,
// Compose).
#include <cstdint>
#include <span>
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/observation/attention_observation.h"

namespace kvscope::policy {

// The order in which kvpress's first press hands on the entries `keep` (ascending indices) of one head that it scored
// `ranking`: its protected entries (the head's first n_sinks and last n_recent, as keep_top_scores protects them)
// padded above every other score as kvpress's scorers pad them (SnapKV's window: max + 1), then torch.topk's order
// (torch_topk.h). Where torch's top |keep| is not `keep` (a tie at the boundary that kvscope resolved otherwise),
// `keep` by that padded score, descending, the earlier entry first.
std::vector<int32_t> kvpress_handoff_order(std::span<const double> ranking, const std::vector<int32_t>& keep,
                                           int n_sinks, int n_recent);

// `obs` as a press sees it that is given only the entries `order[h]` (indices into `obs.layer`'s cache, in that
// order) of each KV head h: the per-query parts (query positions, queries, hidden states, queries and keys before
// RoPE) as they are, n_keys the subset's, and the attention parts `need` asks for (window rows and sums over its
// window, the last row, column sums and log-sum-exp over every query) recomputed over the subset's keys as above,
// from obs.queries (which the request must have asked for; throws Error naming the layer otherwise).
observation::AttentionObservation subset_attention_observation(const observation::AttentionObservation& obs,
                                                               const cache::KVCache& cache,
                                                               const std::vector<std::vector<int32_t>>& order,
                                                               const observation::ObservationRequest& need);

// A cache with `cache`'s layers and heads in which every KV head of `layer` holds KV head `kv_head`'s entries
// `order` (keys, values, positions, per-entry state) in that order: a scorer reading head kv_head of it reads the
// subset (one that scores every head at once reads the subset in each).
cache::KVCache head_subset_cache(const cache::KVCache& cache, int layer, int kv_head,
                                 const std::vector<int32_t>& order);

}  // namespace kvscope::policy
