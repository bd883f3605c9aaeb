#include "kernels/cuda/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvscope::kernels::cuda {

HostAttentionResult attention_reference(const std::vector<float>& q, const std::vector<int32_t>& query_positions,
                                        const HostLayerCache& cache, int n_heads, int n_kv_heads, int head_dim,
                                        float scale, int window) {
  const int n = static_cast<int>(query_positions.size());
  const int d = head_dim, cap = cache.capacity, group = n_heads / n_kv_heads;
  HostAttentionResult r;
  r.window = std::min(window, n);
  r.out.assign(static_cast<std::size_t>(n) * n_heads * d, 0.0f);
  r.log_sum_exp.assign(static_cast<std::size_t>(n_heads) * n, -std::numeric_limits<float>::infinity());
  r.column_sums.assign(static_cast<std::size_t>(n_heads) * cap, 0.0f);
  r.window_sums = r.column_sums;
  r.last_row = r.column_sums;
  r.window_rows.assign(static_cast<std::size_t>(n_heads) * r.window * cap, 0.0f);
  r.rows.assign(static_cast<std::size_t>(n_heads) * n * cap, 0.0f);
  for (int h = 0; h < n_heads; ++h) {
    const int g = h / group;
    const int m = cache.lengths[g];
    const std::size_t base = static_cast<std::size_t>(g) * cap;
    std::vector<double> column(m, 0.0), window_column(m, 0.0);
    for (int i = 0; i < n; ++i) {
      std::vector<double> score(m, -std::numeric_limits<double>::infinity());
      double max_score = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < m; ++j) {
        if (cache.positions[base + j] > query_positions[i]) continue;
        double dot = 0.0;
        for (int t = 0; t < d; ++t)
          dot += static_cast<double>(q[(static_cast<std::size_t>(i) * n_heads + h) * d + t]) *
                 cache.keys[(base + j) * d + t];
        score[j] = dot * scale;
        max_score = std::max(max_score, score[j]);
      }
      if (max_score == -std::numeric_limits<double>::infinity()) continue;  // sees no key: zeros, lse -inf
      double sum = 0.0;
      for (int j = 0; j < m; ++j) sum += std::exp(score[j] - max_score);
      r.log_sum_exp[static_cast<std::size_t>(h) * n + i] = static_cast<float>(max_score + std::log(sum));
      const int window_row = i - (n - r.window);
      for (int j = 0; j < m; ++j) {
        const double p = std::exp(score[j] - max_score) / sum;
        for (int t = 0; t < d; ++t)
          r.out[(static_cast<std::size_t>(i) * n_heads + h) * d + t] +=
              static_cast<float>(p * cache.values[(base + j) * d + t]);
        column[j] += p;
        if (window_row >= 0) {
          window_column[j] += p;
          r.window_rows[(static_cast<std::size_t>(h) * r.window + window_row) * cap + j] = static_cast<float>(p);
        }
        if (i == n - 1) r.last_row[static_cast<std::size_t>(h) * cap + j] = static_cast<float>(p);
        r.rows[(static_cast<std::size_t>(h) * n + i) * cap + j] = static_cast<float>(p);
      }
    }
    for (int j = 0; j < m; ++j) {
      r.column_sums[static_cast<std::size_t>(h) * cap + j] = static_cast<float>(column[j]);
      r.window_sums[static_cast<std::size_t>(h) * cap + j] = static_cast<float>(window_column[j]);
    }
  }
  return r;
}

}  // namespace kvscope::kernels::cuda
