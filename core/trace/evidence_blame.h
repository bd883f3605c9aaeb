#pragma once
// Blame (issue 35): how much of the full cache's attention, at the answer token where a policy's output first
// departs from the full cache's, fell on tokens the policy no longer held, per layer and query head; and how much
// fell on the sample's evidence. Rebuilt exactly from the full run's recorded queries, keys and log-sum-exp
// (exact_attention.h); the evicted set comes from the policy run's kept masks. Definitions:
//   t  the first answer index whose token differs between the runs; 0 when none does (both right or both wrong);
//   q  the position whose query produced answer token t in the full run: prompt + appended - 1 + t;
//   E  per (layer, KV head), the positions <= q the policy run had processed by the end of step row r and does not
//      hold there (kept mask 0 or 2), with r the policy's row that sampled answer token t - 1 (for t = 0, the row
//      that sampled token 0: the cache the answer is produced through). For t > 0 the query's own token is not in
//      the cache at r yet; its own step attends to it in both runs, so it is never lost.
//   lost mass (layer, head)     = sum over j in E of p_full(q, j)
//   evidence mass (layer, head) = sum over evidence positions j <= q of p_full(q, j)
#include <vector>

#include "core/trace/eval_run_info.h"
#include "core/trace/trace_view.h"

namespace kvscope::trace {

struct HeadBlame {
  int layer = 0, head = 0;
  double lost_mass = 0.0;  // NaN when a cell could not be rebuilt (exact_attention.h)
  double evidence_mass = 0.0;
  double evidence_lost_mass = 0.0;  // on evidence positions in E
};

struct EvidenceBlame {
  int divergence = 0;                                // t
  bool diverged = false;                             // the answers differ (t is where); false: t = 0 by definition
  int query = 0;                                     // q
  int mask_step = 0;                                 // r, a row of the policy run's steps/
  std::vector<std::vector<int>> n_lost;              // [layer][kv head]: |E|
  std::vector<HeadBlame> heads;                      // every (layer, query head) of layers with q/k, layer-major
  std::vector<int> layers_without_qk;                // layers the full run recorded no q/k of (`qk=layers:...`): not in heads
  double mean_lost_mass = 0.0, max_lost_mass = 0.0;  // over heads (NaN cells left out)
  // The n heads with the largest lost mass, largest first (NaN last).
  std::vector<HeadBlame> largest(int n) const;
};

// `policy` may be `full` itself (then E is what the full cache did not hold: nothing). Throws Error naming the run
// and what is missing: no q/k in the full run, no kept masks in the policy run, runs of different prompts or model
// shapes, a divergence whose query the full run never computed.
EvidenceBlame evidence_blame(const RunTrace& policy, const EvalRunInfo& policy_info, const RunTrace& full,
                             const EvalRunInfo& full_info, const std::vector<int>& evidence_positions);

}  // namespace kvscope::trace
