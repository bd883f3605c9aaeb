#pragma once
// What an evaluation wrote about one of its runs in a per-sample trace (`eval ... --traces DIR`, issue 35): the
// eval_* run attributes (issue 35; docs/evaluation.md, "Why did it fail"), and how the policy's run finds the full
// cache's run it is measured against. A trace made by `kvscope trace` has none of them: its runs read as if the
// answer started right after the prompt (no appended question), so explain and the evidence view work on it too.
#include <optional>
#include <string>
#include <vector>

#include "core/trace/trace_view.h"

namespace kvscope::trace {

struct EvalRunInfo {
  bool from_evaluation = false;  // the run carries eval_* attributes
  std::string task, role, prediction;
  std::optional<long long> sample;
  std::optional<double> score;
  std::vector<std::string> references;  // eval_references, a JSON array of strings
  int prompt_tokens = 0;                // tokens of the prompt the model ran
  int appended_tokens = 0;              // question tokens fed after compression (query-agnostic), else 0
  // The row of steps/ at whose end the first answer token was sampled: n_prefill_blocks - 1 + appended_tokens.
  int first_answer_step = 0;
  std::string reference_run;  // eval_reference_run ("full" on a policy's run), else empty
};

// Reads the eval_* attributes of `run`; without them, fills what the run itself says (prompt_length, the last
// prefill block). Throws Error naming the run and the attribute when one is present but malformed, or when
// first_answer_step lies outside the run's steps.
EvalRunInfo eval_run_info(const RunTrace& run);

// The run generated after the prompt and the appended question: the answer's token ids and text pieces.
std::vector<int> answer_ids(const RunTrace& run, const EvalRunInfo& info);
std::string answer_text(const RunTrace& run, const EvalRunInfo& info);

// The full cache's run `policy` is measured against: its eval_reference_run, else the run named "full", else a
// run whose policy attribute is "full"; `policy` itself when it is that run. Throws Error naming the runs the
// trace has when there is none.
const RunTrace& reference_run(const TraceView& view, const RunTrace& policy);

// The policy run a user means when they name none: the run whose eval_role is "policy", else the first run that
// is not the full cache's, else the only run. Throws Error for a trace without runs.
const RunTrace& default_policy_run(const TraceView& view);

}  // namespace kvscope::trace
