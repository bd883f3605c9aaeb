#pragma once
// How much of a sample's evidence (core/eval/evidence.h) a cache still holds (issue 35, item 3): per (layer, KV
// head), the share of evidence tokens whose entry is in the cache. The same function reads a live run's cache
// (the evaluation's observer) and a trace's kept masks (kvscope explain), so both report the same numbers.
#include <functional>
#include <vector>

#include "core/eval/evidence.h"

namespace kvscope::eval {

// The positions the spans cover, sorted, each once.
std::vector<int> evidence_positions(const std::vector<EvidenceSpan>& spans);

struct EvidenceRetention {
  std::vector<std::vector<double>> kept;  // [layer][kv head]: share of evidence tokens in the cache
  std::vector<double> layer_kept;         // [layer]: mean over KV heads
  double mean = 1.0;                      // over layers and KV heads
  int min_layer = 0;                      // the layer whose layer_kept is smallest (the first such)
  double min_layer_kept = 1.0;
  int layers_mostly_lost = 0;  // layers whose layer_kept is below one half
  // At least half the layers kept less than half of the evidence: "lost the needle in at least half the layers".
  bool mostly_lost() const { return !layer_kept.empty() && 2 * layers_mostly_lost >= static_cast<int>(layer_kept.size()); }
};

// in_cache(layer, kv_head, position): whether that position's own entry is in the cache (not evicted, not merged
// away). No evidence positions: everything counts as kept (1.0). Throws Error for no layers or no KV heads.
EvidenceRetention evidence_retention(const std::vector<int>& positions, int n_layers, int n_kv_heads,
                                     const std::function<bool(int layer, int kv_head, int position)>& in_cache);

}  // namespace kvscope::eval
