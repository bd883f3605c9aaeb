#include "core/analysis/router_load.h"

#include <cmath>
#include <map>

namespace kvscope::analysis {

std::vector<double> router_load_entropy(const trace::RunTrace& run) {
  if (run.router_k <= 0 || run.routing.empty() || run.n_layers <= 0) return {};
  std::vector<std::map<int, long>> counts(static_cast<std::size_t>(run.n_layers));
  std::vector<long> totals(counts.size(), 0);
  for (const trace::TokenRouting& token : run.routing)
    for (std::size_t i = 0; i < token.experts.size(); ++i) {
      const std::size_t layer = i / static_cast<std::size_t>(run.router_k);
      if (layer >= counts.size() || token.experts[i] < 0) continue;
      ++counts[layer][token.experts[i]];
      ++totals[layer];
    }
  std::vector<double> entropy(counts.size(), 0.0);
  for (std::size_t l = 0; l < counts.size(); ++l)
    for (const auto& [expert, n] : counts[l]) {
      const double p = static_cast<double>(n) / static_cast<double>(totals[l]);
      entropy[l] -= p * std::log2(p);
    }
  return entropy;
}

}  // namespace kvscope::analysis
