#include "core/policy/block_scoring.h"

#include <algorithm>
#include <numeric>

#include "core/common/error.h"

namespace kvscope::policy {

namespace {
using observation::AttentionObservation;

// The layer's entries `order` (indices, in that order) in every KV head of a cache of their own: head h's rows are
// its own keys and values at those indices, the positions those of `order`.
cache::KVCache subset_cache(const cache::KVCache& cache, int layer, const std::vector<int32_t>& order) {
  const int heads = cache.n_kv_heads(), d = cache.head_dim(), m = static_cast<int>(order.size());
  cache::KVCache out(cache.n_layers(), heads, d);
  std::vector<float> k(static_cast<std::size_t>(m) * heads * d), v(k.size());
  for (int h = 0; h < heads; ++h) {
    const auto keys = cache.keys(layer, h), values = cache.values(layer, h);
    for (int j = 0; j < m; ++j) {
      const std::size_t src = static_cast<std::size_t>(order[j]) * d,
                        dst = (static_cast<std::size_t>(j) * heads + h) * d;
      std::copy_n(keys.data() + src, d, k.data() + dst);
      std::copy_n(values.data() + src, d, v.data() + dst);
    }
  }
  std::vector<int32_t> positions;
  const auto all = cache.positions(layer, 0);
  for (int32_t j : order) positions.push_back(all[j]);
  out.append(layer, k.data(), v.data(), m, positions.data());
  return out;
}

// Rows `rows` of a per-query part of `n` rows, `heads` blocks per row, each block's rows picked by `rows_of(block)`.
std::vector<float> gather(const std::vector<float>& part, int n, int heads,
                          const std::function<const std::vector<int32_t>&(int)>& rows_of) {
  if (part.empty() || n == 0) return {};
  const std::size_t width = part.size() / n, block = width / heads;
  const std::size_t m = rows_of(0).size();
  std::vector<float> out(m * width);
  for (std::size_t j = 0; j < m; ++j)
    for (int b = 0; b < heads; ++b) {
      const int32_t src = rows_of(b)[j];
      std::copy_n(part.data() + src * width + b * block, block, out.data() + j * width + b * block);
    }
  return out;
}

AttentionObservation subset_observation(const AttentionObservation& obs,
                                        const std::vector<std::vector<int32_t>>& subset) {
  AttentionObservation out = observation::same_step(obs);
  const int n = obs.n_queries(), group = obs.n_heads / obs.n_kv_heads;
  for (int32_t j : subset[0]) out.query_positions.push_back(obs.query_positions.at(j));
  auto by_kv_head = [&](int h) -> const std::vector<int32_t>& { return subset[h]; };
  auto by_query_head = [&](int q) -> const std::vector<int32_t>& { return subset[q / group]; };
  // BlockPress views the hidden dimension as n_kv_heads slices and gathers each with its head's entries.
  out.hidden_states = gather(obs.hidden_states, n, obs.n_kv_heads, by_kv_head);
  out.keys_pre_rope = gather(obs.keys_pre_rope, n, obs.n_kv_heads, by_kv_head);
  out.queries_pre_rope = gather(obs.queries_pre_rope, n, obs.n_heads, by_query_head);
  out.queries = gather(obs.queries, n, obs.n_heads, by_query_head);
  return out;
}
}  // namespace

std::vector<std::vector<int32_t>> block_scored_keep(const AttentionObservation& obs, const cache::KVCache& cache,
                                                    int budget, int block, const SubsetRanking& rank) {
  const int layer = obs.layer, heads = cache.n_kv_heads(), n = cache.size(layer, 0);
  for (int h = 1; h < heads; ++h)
    if (cache.size(layer, h) != n)
      throw Error("block_scoring: layer " + std::to_string(layer) + " KV heads differ in length");
  if (obs.n_queries() != n)
    throw Error("block_scoring: layer " + std::to_string(layer) + " holds " + std::to_string(n) +
                " entries but its prefill had " + std::to_string(obs.n_queries()) + " queries (a one-pass prefill)");
  budget = std::clamp(budget, 0, n);
  // As BlockPress: the kept entries in the order their scores ranked them (the first block: the first `budget`),
  // then the block's; a scorer that treats its first rows apart (ExpectedAttention's n_sink) sees that order.
  std::vector<std::vector<int32_t>> kept(heads, std::vector<int32_t>(budget));
  for (auto& k : kept) std::iota(k.begin(), k.end(), 0);
  const int step = std::min(std::max(block, 1), n);
  for (int start = budget; start < n; start += step) {
    const int end = std::min(start + step, n);
    std::vector<std::vector<int32_t>> current = kept;
    for (auto& c : current)
      for (int j = start; j < end; ++j) c.push_back(j);
    const AttentionObservation sub = subset_observation(obs, current);
    for (int h = 0; h < heads; ++h) {
      // Each head's entries in its own order: a cache whose every head holds them, of which head h is read.
      cache::KVCache scratch = subset_cache(cache, layer, current[h]);
      const std::vector<double> r = rank(sub, h, scratch);
      const int m = static_cast<int>(current[h].size());
      if (static_cast<int>(r.size()) != m)
        throw Error("block_scoring: the scorer ranked " + std::to_string(r.size()) + " of " + std::to_string(m) +
                    " entries");
      std::vector<int32_t> order(m);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return r[a] > r[b]; });
      kept[h].clear();
      for (int i = 0; i < budget; ++i) kept[h].push_back(current[h][order[i]]);
    }
  }
  for (auto& k : kept) std::sort(k.begin(), k.end());
  return kept;
}

std::vector<std::vector<int32_t>> chunk_scored_keep(const AttentionObservation& obs, const cache::KVCache& cache,
                                                    int chunk, double kept_share, const SubsetRanking& rank) {
  const int layer = obs.layer, heads = cache.n_kv_heads(), n = cache.size(layer, 0);
  for (int h = 1; h < heads; ++h)
    if (cache.size(layer, h) != n)
      throw Error("selection=chunk: layer " + std::to_string(layer) + " KV heads differ in length");
  if (obs.n_queries() != n)
    throw Error("selection=chunk: layer " + std::to_string(layer) + " holds " + std::to_string(n) +
                " entries but its prefill had " + std::to_string(obs.n_queries()) + " queries (a one-pass prefill)");
  std::vector<std::vector<int32_t>> kept(heads);
  const int step = std::max(chunk, 1);
  for (int start = 0; start < n; start += step) {
    const int end = std::min(start + step, n), m = end - start;
    std::vector<int32_t> entries(m);
    std::iota(entries.begin(), entries.end(), start);
    const AttentionObservation sub = subset_observation(obs, std::vector<std::vector<int32_t>>(heads, entries));
    cache::KVCache scratch = subset_cache(cache, layer, entries);
    // kvpress: n_kept = max(1, int(chunk_length * (1 - compression_ratio))), in double as Python computes it
    const int n_kept = std::clamp(static_cast<int>(m * kept_share), 1, m);
    for (int h = 0; h < heads; ++h) {
      const std::vector<double> r = rank(sub, h, scratch);
      if (static_cast<int>(r.size()) != m)
        throw Error("selection=chunk: the scorer ranked " + std::to_string(r.size()) + " of " + std::to_string(m) +
                    " entries");
      std::vector<int32_t> order(m);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return r[a] > r[b]; });
      for (int i = 0; i < n_kept; ++i) kept[h].push_back(start + order[i]);
    }
  }
  for (auto& k : kept) std::sort(k.begin(), k.end());
  return kept;
}

}  // namespace kvscope::policy
