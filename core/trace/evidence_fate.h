#pragma once
// Where each evidence token of a sample went in a recorded run (issue 35): the events table's record of every
// (layer, KV head) cache it left, evicted at step s or merged into position p, and how many caches still hold it.
#include <string>
#include <vector>

#include "core/eval/evidence.h"
#include "core/trace/trace_view.h"

namespace kvscope::trace {

struct EvidenceDeparture {
  int layer = 0, kv_head = 0;
  int step = 0;  // row of steps/ (prefill blocks first, then decode steps)
  EventAction action = EventAction::Evicted;
  int merge_target = -1;  // the position it was merged into; -1 when evicted
};

struct EvidenceFate {
  int position = 0;
  std::string kind;                           // of the first span holding it
  int caches = 0;                             // (layer, KV head) caches of the run
  int kept = 0;                               // of those, holding it (kept mask 1) at the end of the step asked for
  std::vector<EvidenceDeparture> departures;  // up to that step, earliest first
  int evicted() const;
  int merged() const;
};

// One entry per evidence position (sorted), from events up to and including step row `step`. Throws Error naming
// the run when it has no kept masks or `step` is outside them.
std::vector<EvidenceFate> evidence_fate(const RunTrace& run, const std::vector<eval::EvidenceSpan>& spans, int step);

}  // namespace kvscope::trace
