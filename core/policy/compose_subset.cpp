#include "core/policy/compose_subset.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/common/error.h"
#include "core/policy/torch_topk.h"

namespace kvscope::policy {

using observation::AttentionObservation;

std::vector<int32_t> kvpress_handoff_order(std::span<const double> ranking, const std::vector<int32_t>& keep,
                                           int n_sinks, int n_recent) {
  const int n = static_cast<int>(ranking.size()), k = static_cast<int>(keep.size());
  n_sinks = std::clamp(n_sinks, 0, n);
  n_recent = std::clamp(n_recent, 0, n - n_sinks);
  const auto is_protected = [&](int j) { return j < n_sinks || j >= n - n_recent; };
  double top = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < n; ++j)
    if (!is_protected(j) && !std::isnan(ranking[j])) top = std::max(top, ranking[j]);
  if (!std::isfinite(top)) top = 0.0;
  std::vector<double> padded(ranking.begin(), ranking.end());
  for (int j = 0; j < n; ++j)
    if (is_protected(j))
      padded[j] = top + 1.0;
    else if (std::isnan(padded[j]))
      padded[j] = -std::numeric_limits<double>::infinity();  // keep_top_scores' rule
  std::vector<int32_t> order = torch_topk_order(padded, k);
  std::vector<int32_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  if (sorted == keep) return order;
  order = keep;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return padded[a] > padded[b]; });
  return order;
}

AttentionObservation subset_attention_observation(const AttentionObservation& obs, const cache::KVCache& cache,
                                                  const std::vector<std::vector<int32_t>>& order,
                                                  const observation::ObservationRequest& need) {
  AttentionObservation out = observation::same_step(obs);
  out.query_positions = obs.query_positions;
  out.queries = obs.queries;
  out.queries_pre_rope = obs.queries_pre_rope;
  out.keys_pre_rope = obs.keys_pre_rope;
  out.hidden_states = obs.hidden_states;
  const int n = obs.n_queries(), heads = obs.n_heads, group = heads / std::max(obs.n_kv_heads, 1);
  const int d = cache.head_dim();
  for (int h = 0; h < obs.n_kv_heads; ++h) out.n_keys.push_back(static_cast<int>(order.at(h).size()));
  const bool window_parts = need.window_rows || need.window_sums;
  if (!window_parts && !need.last_row && !need.column_sums && !need.log_sum_exp) return out;
  if (obs.queries.size() != static_cast<std::size_t>(n) * heads * d)
    throw Error("compose: layer " + std::to_string(obs.layer) + "'s observation has no queries to recompute the " +
                "second policy's attention over the first's entries from");
  out.window = window_parts ? std::min(std::max(need.window, 0), n) : 0;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // Rows are needed for the window's queries, the last query, or every query (column sums, log-sum-exp).
  const bool every_row = need.column_sums || need.log_sum_exp;
  const int first_row = every_row ? 0 : need.last_row ? std::min(n - out.window, n - 1) : n - out.window;
  if (window_parts) {
    out.window_rows.assign(heads, {});
    out.window_sums.assign(heads, {});
  }
  if (need.last_row) out.last_row.assign(heads, {});
  if (need.column_sums) out.column_sums.assign(heads, {});
  if (need.log_sum_exp) out.log_sum_exp.assign(heads, {});
  std::vector<float> row;
  for (int q = 0; q < heads; ++q) {
    const int h = q / group;
    const std::vector<int32_t>& entries = order.at(h);
    const int k = static_cast<int>(entries.size());
    const std::span<const float> keys = cache.keys(obs.layer, h);
    if (window_parts) {
      out.window_rows[q].assign(static_cast<std::size_t>(out.window) * k, 0.0f);
      out.window_sums[q].assign(k, 0.0f);
    }
    if (need.last_row) out.last_row[q].assign(k, 0.0f);
    if (need.column_sums) out.column_sums[q].assign(k, 0.0f);
    if (need.log_sum_exp) out.log_sum_exp[q].assign(n, -std::numeric_limits<float>::infinity());
    for (int i = std::max(first_row, 0); i < n; ++i) {
      // kvpress's mask: the last query sees all k entries, each earlier one one fewer.
      const int visible = std::clamp(k - n + i + 1, 0, k);
      row.assign(k, 0.0f);
      if (visible > 0) {
        const float* query = obs.queries.data() + (static_cast<std::size_t>(i) * heads + q) * d;
        float top = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < visible; ++j) {
          const float* key = keys.data() + static_cast<std::size_t>(entries[j]) * d;
          float dot = 0.0f;
          for (int c = 0; c < d; ++c) dot += query[c] * key[c];
          row[j] = dot * scale;
          top = std::max(top, row[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j < visible; ++j) sum += row[j] = std::exp(row[j] - top);
        for (int j = 0; j < visible; ++j) row[j] /= sum;
        if (need.log_sum_exp) out.log_sum_exp[q][i] = top + std::log(sum);
      }
      if (need.column_sums)
        for (int j = 0; j < k; ++j) out.column_sums[q][j] += row[j];
      if (need.last_row && i == n - 1) out.last_row[q] = row;
      if (window_parts && i >= n - out.window) {
        std::copy(row.begin(), row.end(),
                  out.window_rows[q].begin() + static_cast<std::ptrdiff_t>(i - (n - out.window)) * k);
        for (int j = 0; j < k; ++j) out.window_sums[q][j] += row[j];
      }
    }
  }
  return out;
}

cache::KVCache head_subset_cache(const cache::KVCache& cache, int layer, int kv_head,
                                 const std::vector<int32_t>& order) {
  const int heads = cache.n_kv_heads(), d = cache.head_dim(), m = static_cast<int>(order.size());
  cache::KVCache out(cache.n_layers(), heads, d);
  const auto keys = cache.keys(layer, kv_head), values = cache.values(layer, kv_head);
  const auto positions = cache.positions(layer, kv_head);
  std::vector<float> k(static_cast<std::size_t>(m) * heads * d), v(k.size());
  std::vector<int32_t> pos(m);
  for (int j = 0; j < m; ++j) {
    pos[j] = positions[order[j]];
    for (int h = 0; h < heads; ++h) {
      const std::size_t dst = (static_cast<std::size_t>(j) * heads + h) * d;
      std::copy_n(keys.data() + static_cast<std::size_t>(order[j]) * d, d, k.data() + dst);
      std::copy_n(values.data() + static_cast<std::size_t>(order[j]) * d, d, v.data() + dst);
    }
  }
  out.append(layer, k.data(), v.data(), m, pos.data());
  const auto state = cache.scores(layer, kv_head);
  for (int h = 0; h < heads; ++h) {
    const auto target = out.mutable_scores(layer, h);
    for (int j = 0; j < m && static_cast<std::size_t>(order[j]) < state.size(); ++j) target[j] = state[order[j]];
  }
  return out;
}

}  // namespace kvscope::policy
