#include "core/trace/evidence_in_cache.h"

#include <algorithm>
#include <cmath>

#include "core/common/error.h"

namespace kvscope::trace {

namespace {

std::vector<int> processed_by(const RunTrace& run, const std::vector<int>& positions, int step) {
  const int seen = run.steps[step].seq_len;
  std::vector<int> out;
  std::copy_if(positions.begin(), positions.end(), std::back_inserter(out), [&](int p) { return p < seen; });
  return out;
}

}  // namespace

eval::EvidenceRetention evidence_in_cache(const RunTrace& run, const std::vector<int>& positions, int step) {
  if (static_cast<int>(run.kept_mask.size()) != run.n_layers || run.n_layers == 0)
    throw Error("run '" + run.name + "' has kept masks for " + std::to_string(run.kept_mask.size()) + " of its " +
                std::to_string(run.n_layers) + " layers: evidence retention needs every layer's");
  if (step < 0 || step >= run.n_steps())
    throw Error("run '" + run.name + "': step " + std::to_string(step) + " is outside its " +
                std::to_string(run.n_steps()) + " recorded steps");
  for (const KeptMask& m : run.kept_mask)
    if (step >= m.n_steps || m.n_kv_heads != run.n_kv_heads)
      throw Error("run '" + run.name + "': a kept mask holds " + std::to_string(m.n_steps) + " steps and " +
                  std::to_string(m.n_kv_heads) + " KV heads, short of step " + std::to_string(step) +
                  " or of the run's " + std::to_string(run.n_kv_heads) + " KV heads");
  return eval::evidence_retention(processed_by(run, positions, step), run.n_layers, run.n_kv_heads,
                                  [&](int layer, int kv_head, int p) {
                                    const KeptMask& m = run.kept_mask[static_cast<std::size_t>(layer)];
                                    return p < m.n_positions && m.at(kv_head, p, step) == kKept;
                                  });
}

std::vector<std::vector<double>> evidence_kept_by_step(const RunTrace& run, const std::vector<int>& positions) {
  std::vector<std::vector<double>> out;
  for (int s = 0; s < run.n_steps(); ++s) {
    if (processed_by(run, positions, s).empty() && !positions.empty()) {
      out.emplace_back(static_cast<std::size_t>(run.n_layers), std::nan(""));
      continue;
    }
    out.push_back(evidence_in_cache(run, positions, s).layer_kept);
  }
  return out;
}

}  // namespace kvscope::trace
