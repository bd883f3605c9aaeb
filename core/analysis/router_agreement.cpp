#include "core/analysis/router_agreement.h"

#include <algorithm>
#include <limits>

namespace kvscope::analysis {

int fed_token(const trace::RunTrace& run, int position) {
  const int prompt = static_cast<int>(run.prompt_ids.size());
  if (position < 0) return -1;
  if (position < prompt) return run.prompt_ids[position];
  const int generated = position - prompt;
  return generated < static_cast<int>(run.generated_ids.size()) ? run.generated_ids[generated] : -1;
}

Map2D router_agreement(const trace::RunTrace& run, const trace::RunTrace& baseline) {
  Map2D out;
  const int k = run.router_k;
  if (k <= 0 || baseline.router_k != k || run.n_layers != baseline.n_layers || run.routing.empty() ||
      baseline.routing.empty())
    return out;
  const int positions = static_cast<int>(run.routing.size());
  out.rows = out.source_rows = run.n_layers;
  out.cols = out.source_cols = positions;
  out.values.assign(static_cast<std::size_t>(out.rows) * out.cols, std::numeric_limits<float>::quiet_NaN());
  for (int p = 0; p < positions && p < static_cast<int>(baseline.routing.size()); ++p) {
    const int token = fed_token(run, p);
    if (token < 0 || token != fed_token(baseline, p)) break;  // the streams parted: nothing later compares
    const trace::TokenRouting& a = run.routing[p];
    const trace::TokenRouting& b = baseline.routing[p];
    for (int l = 0; l < run.n_layers; ++l) {
      int shared = 0;
      for (int i = 0; i < k; ++i) {
        const int16_t e = a.experts[static_cast<std::size_t>(l) * k + i];
        const auto first = b.experts.begin() + static_cast<std::ptrdiff_t>(l) * k;
        shared += std::find(first, first + k, e) != first + k ? 1 : 0;
      }
      out.values[static_cast<std::size_t>(l) * positions + p] = static_cast<float>(shared) / static_cast<float>(k);
    }
  }
  return out;
}

Map2D router_weights(const trace::RunTrace& run, int layer) {
  Map2D out;
  const int k = run.router_k;
  if (k <= 0 || run.routing.empty() || layer < 0 || layer >= run.n_layers) return out;
  int experts = 0;
  for (const trace::TokenRouting& token : run.routing)
    for (int16_t e : token.experts) experts = std::max(experts, e + 1);
  const int positions = static_cast<int>(run.routing.size());
  out.rows = out.source_rows = experts;
  out.cols = out.source_cols = positions;
  out.values.assign(static_cast<std::size_t>(experts) * positions, 0.0f);
  for (int p = 0; p < positions; ++p)
    for (int i = 0; i < k; ++i) {
      const std::size_t at = static_cast<std::size_t>(layer) * k + i;
      const int16_t e = run.routing[p].experts[at];
      if (e >= 0) out.values[static_cast<std::size_t>(e) * positions + p] = run.routing[p].weights[at];
    }
  return out;
}

}  // namespace kvscope::analysis
