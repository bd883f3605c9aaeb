#include "core/trace/evidence_fate.h"

#include <algorithm>
#include <map>

#include "core/common/error.h"
#include "core/eval/evidence_retention.h"

namespace kvscope::trace {

int EvidenceFate::evicted() const {
  return static_cast<int>(std::count_if(departures.begin(), departures.end(),
                                        [](const auto& d) { return d.action == EventAction::Evicted; }));
}

int EvidenceFate::merged() const { return static_cast<int>(departures.size()) - evicted(); }

std::vector<EvidenceFate> evidence_fate(const RunTrace& run, const std::vector<eval::EvidenceSpan>& spans, int step) {
  if (static_cast<int>(run.kept_mask.size()) != run.n_layers || step < 0 || step >= run.n_steps())
    throw Error("run '" + run.name + "' has no kept masks at step " + std::to_string(step) + " (" +
                std::to_string(run.kept_mask.size()) + " layers' masks, " + std::to_string(run.n_steps()) +
                " steps): where the evidence went cannot be read");
  std::vector<EvidenceFate> out;
  std::map<int, std::size_t> index;
  for (int p : eval::evidence_positions(spans)) {
    EvidenceFate f;
    f.position = p;
    for (const auto& s : spans)
      if (p >= s.first && p <= s.last) {
        f.kind = s.kind;
        break;
      }
    f.caches = run.n_layers * run.n_kv_heads;
    for (int l = 0; l < run.n_layers; ++l) {
      const KeptMask& m = run.kept_mask[static_cast<std::size_t>(l)];
      for (int g = 0; g < m.n_kv_heads; ++g)
        if (p < m.n_positions && step < m.n_steps && m.at(g, p, step) == kKept) ++f.kept;
    }
    index[p] = out.size();
    out.push_back(std::move(f));
  }
  for (const Event& e : run.events) {
    const auto it = index.find(e.position);
    const int row = run.step_row(e);
    if (it == index.end() || row > step) continue;
    out[it->second].departures.push_back(
        {e.layer, e.kv_head, row, e.action, e.action == EventAction::Merged ? e.merge_target : -1});
  }
  for (auto& f : out)
    std::stable_sort(f.departures.begin(), f.departures.end(), [](const auto& a, const auto& b) {
      return a.step != b.step ? a.step < b.step : a.layer != b.layer ? a.layer < b.layer : a.kv_head < b.kv_head;
    });
  return out;
}

}  // namespace kvscope::trace
