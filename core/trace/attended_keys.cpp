#include "core/trace/attended_keys.h"

#include <algorithm>

namespace kvscope::trace {

AttendedKeys::AttendedKeys(const RunTrace& run, int layer, int kv_head) : kv_head_(kv_head) {
  if (layer >= 0 && layer < static_cast<int>(run.kept_mask.size()) && kv_head >= 0 && kv_head < run.kept_mask[layer].n_kv_heads)
    kept_ = &run.kept_mask[layer];
  for (const StepStats& s : run.steps) step_end_.push_back(s.seq_len);
}

int AttendedKeys::step_of(int query) const {
  return static_cast<int>(std::upper_bound(step_end_.begin(), step_end_.end(), query) - step_end_.begin());
}

KeyState AttendedKeys::at(int query, int key) const {
  KeyState s;
  row(query, key, key + 1, &s);
  return s;
}

void AttendedKeys::row(int query, int k0, int k1, KeyState* out) const {
  const int step = step_of(query);
  const int step_first = step == 0 ? 0 : step_end_[static_cast<std::size_t>(step - 1)];
  // Keys before the step: those the cache held at the end of the previous step. Unknown without a kept mask.
  const bool membership_known = step == 0 || (kept_ && step - 1 < kept_->n_steps);
  for (int k = k0; k < k1; ++k) {
    KeyState& s = out[k - k0];
    if (k > query) s = KeyState::Future;
    else if (!membership_known) s = KeyState::Unknown;
    else if (k < step_first && (k >= kept_->n_positions || kept_->at(kv_head_, k, step - 1) != kKept)) s = KeyState::NotInCache;
    else s = KeyState::Attended;
  }
}

}  // namespace kvscope::trace
