#pragma once
// The shared top-k step most policies reduce to: a score per cache entry, protected sinks and recent
// entries, and the highest scores filling the rest of the budget.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/cache/cache_edit.h"
#include "core/observation/attention_observation.h"

namespace kvscope::policy {

// Ascending entry indices: the first `sinks` entries, the last `recent` entries, then the highest
// scores among the rest until `budget` entries are kept (ties go to the earlier entry). Keeps all
// entries when budget >= scores.size().
std::vector<int32_t> keep_top_scores(std::span<const float> scores, int budget, int sinks, int recent);
// The same ranking on float64 scores (a Python policy's, which differ where float32 would tie them).
std::vector<int32_t> keep_top_scores(std::span<const double> scores, int budget, int sinks, int recent);

// AdaKV's head-adaptive selection (Feng et al. 2024, arXiv 2407.11550, Alg. 1), as kvpress's AdaKVPress computes
// it: the heads of a layer share heads x `budget` entries. Each head first keeps its sinks and recent entries
// and at least `n_safe` (the safeguard) of its own highest scores; the rest of the layer's entries are then
// chosen by score across all heads at once (ties: the lower head, then the earlier entry). Ascending entry
// indices per head; every entry stays when the heads hold no more than heads x budget together.
std::vector<std::vector<int32_t>> keep_top_scores_across_heads(const std::vector<std::vector<double>>& scores,
                                                               int budget, int sinks, int recent, int n_safe);

enum class Pooling { None, Avg, Max };
Pooling parse_pooling(const std::string& name);  // "none" | "avg" | "max"
// 1-D pooling with stride 1 and zero padding of kernel/2 on each side, as SnapKV applies it
// (average divides by the full kernel size); kernel must be odd.
std::vector<float> pool1d(std::span<const float> x, int kernel, Pooling pooling);

enum class GroupReduce { Mean, Max, Sum };
GroupReduce parse_group_reduce(const std::string& name);  // "mean" | "max" | "sum"
// Combines per-query-head vectors (e.g. obs.window_sums) of the query heads of one KV head.
std::vector<float> reduce_group(const std::vector<std::vector<float>>& per_head, int kv_head, int group_size,
                                GroupReduce reduce);

// A HeadEdit keeping `keep`, carrying the scores it was ranked by.
cache::HeadEdit keep_edit(int layer, int kv_head, std::vector<int32_t> keep, std::vector<float> scores);

}  // namespace kvscope::policy
