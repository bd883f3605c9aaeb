#include "core/eval/evidence_observer.h"

#include <algorithm>

namespace kvscope::eval {

EvidenceObserver::EvidenceObserver(const std::vector<EvidenceSpan>& spans, int appended_tokens, int n_layers,
                                   int n_kv_heads)
    : spans_(spans),
      positions_(evidence_positions(spans)),
      appended_(appended_tokens),
      n_layers_(n_layers),
      n_kv_heads_(n_kv_heads) {
  departures_.reserve(positions_.size());
  for (int p : positions_) departures_.push_back({p});
}

void EvidenceObserver::on_edit(const cache::CacheEdit& edit, const cache::KVCache& before,
                               const observation::StepInfo&) {
  if (positions_.empty()) return;
  // The step being run is the row after the steps that ended.
  for (const cache::HeadEdit& head : edit.heads) {
    const auto entries = before.positions(head.layer, head.kv_head);
    std::vector<bool> source(entries.size(), false);
    for (const auto& merge : head.merges)
      for (int32_t s : merge.sources) source[static_cast<std::size_t>(s)] = true;
    for (const auto& merge : head.value_merges) source[static_cast<std::size_t>(merge.source)] = true;
    std::size_t k = 0;  // head.keep is strictly increasing
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (k < head.keep.size() && static_cast<std::size_t>(head.keep[k]) == i) {
        ++k;
        continue;
      }
      const auto it = std::lower_bound(positions_.begin(), positions_.end(), entries[i]);
      if (it == positions_.end() || *it != entries[i]) continue;
      EvidenceDeparture& d = departures_[static_cast<std::size_t>(it - positions_.begin())];
      if (d.left) continue;
      d = {entries[i], true, steps_ended_, head.layer, head.kv_head, source[i]};
    }
  }
}

std::optional<EvidenceReport> EvidenceObserver::report() const {
  if (positions_.empty() || !retention_) return std::nullopt;
  return EvidenceReport{spans_, *retention_, first_answer_step_, departures_};
}

void EvidenceObserver::on_step_end(const observation::StepInfo&, const cache::KVCache& cache, int token, float) {
  const int row = steps_ended_++;
  if (token < 0 || first_answer_step_ >= 0) return;
  if (tokens_sampled_++ < appended_) return;
  first_answer_step_ = row;
  if (positions_.empty()) return;
  retention_ = evidence_retention(positions_, n_layers_, n_kv_heads_, [&](int layer, int kv_head, int position) {
    const auto held = cache.positions(layer, kv_head);  // entries stay in position order
    return std::binary_search(held.begin(), held.end(), position);
  });
}

}  // namespace kvscope::eval
