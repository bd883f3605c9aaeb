#pragma once
// Where a run is: which phase, which block or decode step, how many tokens so far.
#include "core/observation/attention_observation.h"

namespace kvscope::observation {

struct StepInfo {
  Phase phase = Phase::Prefill;
  int step = 0;               // prefill block index, or decode step index
  int seq_len = 0;            // tokens processed so far (prompt + generated), including this step's
  bool prefill_done = false;  // true for the last prefill block and every decode step
};

}  // namespace kvscope::observation
