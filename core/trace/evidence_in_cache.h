#pragma once
// Evidence retention (core/eval/evidence_retention.h) read from a recorded run's kept masks instead of a live
// cache: the same function, so `kvscope explain`, the evidence figure and the evaluation report the same numbers.
// A position counts as in the cache when its kept-mask value is 1 at the end of the step (0 evicted or not yet
// seen, 2 merged away).
#include <vector>

#include "core/eval/evidence_retention.h"
#include "core/trace/trace_view.h"

namespace kvscope::trace {

// Retention of `positions` at the end of step row `step`, over the positions the run had processed by then (a
// block-wise prefill has not seen the later ones yet); none processed: every share is 1 (nothing to lose yet).
// Throws Error naming the run when it has no kept masks or `step` is outside its recorded steps.
eval::EvidenceRetention evidence_in_cache(const RunTrace& run, const std::vector<int>& positions, int step);

// [step][layer]: the share of evidence positions kept, mean over KV heads, at the end of every recorded step; NaN
// at steps before any evidence position was processed.
std::vector<std::vector<double>> evidence_kept_by_step(const RunTrace& run, const std::vector<int>& positions);

}  // namespace kvscope::trace
