#include "core/eval/evidence_retention.h"

#include <algorithm>

#include "core/common/error.h"

namespace kvscope::eval {

std::vector<int> evidence_positions(const std::vector<EvidenceSpan>& spans) {
  std::vector<int> out;
  for (const auto& span : spans)
    for (int p = span.first; p <= span.last; ++p) out.push_back(p);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

EvidenceRetention evidence_retention(const std::vector<int>& positions, int n_layers, int n_kv_heads,
                                     const std::function<bool(int, int, int)>& in_cache) {
  if (n_layers < 1 || n_kv_heads < 1)
    throw Error("evidence retention needs at least one layer and KV head (got " + std::to_string(n_layers) +
                " layers, " + std::to_string(n_kv_heads) + " KV heads)");
  EvidenceRetention out;
  out.kept.assign(n_layers, std::vector<double>(n_kv_heads, 1.0));
  out.layer_kept.assign(n_layers, 1.0);
  double total = 0.0;
  for (int layer = 0; layer < n_layers; ++layer) {
    double layer_sum = 0.0;
    for (int head = 0; head < n_kv_heads; ++head) {
      if (!positions.empty()) {
        const auto held = std::count_if(positions.begin(), positions.end(),
                                        [&](int p) { return in_cache(layer, head, p); });
        out.kept[layer][head] = static_cast<double>(held) / static_cast<double>(positions.size());
      }
      layer_sum += out.kept[layer][head];
    }
    out.layer_kept[layer] = layer_sum / n_kv_heads;
    total += layer_sum;
    if (out.layer_kept[layer] < 0.5) ++out.layers_mostly_lost;
    if (layer == 0 || out.layer_kept[layer] < out.min_layer_kept)
      out.min_layer = layer, out.min_layer_kept = out.layer_kept[layer];
  }
  out.mean = total / (static_cast<double>(n_layers) * n_kv_heads);
  return out;
}

}  // namespace kvscope::eval
