#pragma once
// Which keys a query row of a run attended to, from data every trace has (docs/trace-format.md `qk/`): in the
// row's step (a prefill block or a decode step: the row of `steps/` whose seq_len first exceeds it), the step's
// own positions up to the row (causal), and before the step the positions whose kept mask is 1 at the end of the
// previous step. One derivation for everything that asks "what was in the cache then": exact attention
// (exact_attention.h) computes only attended cells, and the window blanks the others and marks a step's cache.
#include <cstdint>
#include <vector>

#include "core/trace/trace_view.h"

namespace kvscope::trace {

enum class KeyState : uint8_t {
  Attended,    // in the cache the row attended to
  Future,      // after the row (causal mask)
  NotInCache,  // before the row's step and not in the cache at the end of the previous step (evicted, merged away)
  Unknown,     // the run has no kept mask for the previous step, so membership cannot be told
};

class AttendedKeys {
 public:
  // kv_head: the KV head the query head reads (grouped-query attention). No kept mask for `layer`: every key
  // before a row's step is Unknown.
  AttendedKeys(const RunTrace& run, int layer, int kv_head);

  // The row of `steps/` a query position belongs to (n_steps when past every recorded step).
  int step_of(int query) const;
  // Tokens processed by the end of step row `step` (its seq_len).
  int step_end(int step) const { return step_end_[static_cast<std::size_t>(step)]; }
  int n_steps() const { return static_cast<int>(step_end_.size()); }

  KeyState at(int query, int key) const;
  // at(query, k) for k in [k0, k1), into out[0 .. k1 - k0).
  void row(int query, int k0, int k1, KeyState* out) const;

 private:
  const KeptMask* kept_ = nullptr;
  int kv_head_;
  std::vector<int> step_end_;  // seq_len of each recorded step
};

}  // namespace kvscope::trace
