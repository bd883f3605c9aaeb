#include "core/engine/decode_threads.h"

#include <algorithm>

namespace kvscope::engine {

namespace {
constexpr std::size_t kRecentSteps = 3;
}

double DecodeThreads::Estimate::typical() const {
  if (recent.empty()) return 0.0;
  std::vector<double> sorted = recent;
  std::sort(sorted.begin(), sorted.end());
  return sorted[sorted.size() / 2];
}

DecodeThreads::DecodeThreads(int max_threads) {
  for (int t = std::max(max_threads, 1); t > 1; t /= 2) candidates_.push_back(t);
  candidates_.push_back(1);
  estimates_.resize(candidates_.size());
}

int DecodeThreads::trial_candidate() const {
  const int n = static_cast<int>(candidates_.size());
  if (n == 1) return chosen_;
  // The fewer-threads neighbour and the more-threads neighbour in turn (one of them when at an end).
  const int fewer = chosen_ + 1, more = chosen_ - 1;
  if (fewer >= n) return more;
  if (more < 0) return fewer;
  return trials_ % 2 == 0 ? fewer : more;
}

int DecodeThreads::next() const {
  const bool trial = trial_due_ || steps_since_trial_ >= interval_;
  return candidates_[trial ? trial_candidate() : chosen_];
}

void DecodeThreads::record(int threads, double ms) {
  const auto found = std::find(candidates_.begin(), candidates_.end(), threads);
  if (found == candidates_.end()) return;
  const int index = static_cast<int>(found - candidates_.begin());
  Estimate& e = estimates_[index];
  if (index == chosen_) {
    const double before = e.typical();
    e.recent.push_back(ms);
    if (e.recent.size() > kRecentSteps) e.recent.erase(e.recent.begin());
    ++steps_since_trial_;
    // A sudden slowdown of the chosen count: the load may have changed, so the next step tries another count
    // against this step alone (if it was a one-off, the choice comes back at the following trial).
    if (before > 0.0 && ms > kSlowdown * before && candidates_.size() > 1) {
      trial_due_ = true;
      e.recent.assign(1, ms);
    }
    return;
  }
  // A trial: one step decides against the choice's recent median.
  e.recent.assign(1, ms);
  ++trials_;
  trial_due_ = false;
  steps_since_trial_ = 0;
  const double current = estimates_[chosen_].typical();
  if (current > 0.0 && ms < kSwitchGain * current) {
    chosen_ = index;
    estimates_[chosen_].recent.assign(1, ms);
    interval_ = kFirstInterval;
  } else {
    // A clearly worse trial (the usual one on an idle machine) earns a longer wait than a close one.
    interval_ = std::min((ms > kSlowdown * current ? 4 : 2) * interval_, kMaxInterval);
  }
}

}  // namespace kvscope::engine
