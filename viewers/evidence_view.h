#pragma once
// `kvscope figure TRACE --view evidence` (issue 35): how much of a sample's evidence each layer's cache held at
// every step of a run, as a heat map [layer][step] of the share of evidence tokens kept (mean over KV heads;
// core/trace/evidence_in_cache.h), with the step that sampled the first answer token marked, beside the share
// each layer kept at that step.
#include <vector>

#include "core/eval/evidence.h"
#include "viewers/figure.h"

namespace kvscope::viewers {

// Throws Error naming the run when it has no kept masks or `first_answer_step` is outside its steps.
Figure evidence_figure(const trace::RunTrace& run, const std::vector<eval::EvidenceSpan>& evidence,
                       int first_answer_step);

}  // namespace kvscope::viewers
