#pragma once
// One row per run: what it cost (cache bytes kept against the full cache), what it changed (mean
// log-prob of its continuation against a full-cache run of the same prompt, and where its greedy text
// first differs) and how long it took. Below, the active run's fidelity to the full cache as the worker
// measured it after the run (Session: RunRequest::fidelity), the numbers `kvscope eval fidelity` prints.
#include <string>
#include <utility>
#include <vector>

#include "core/eval/eval_run.h"
#include "viewers/panel.h"

namespace kvscope::viewers {

struct RunNumbers {
  double cache_bytes = 0, full_cache_bytes = 0;  // final cache as allocated, and a full cache's payload
  double bytes_share = 0;  // cache_bytes / the finished baseline's (1 for a full cache); NaN without one
  double kept_share = 1;                          // entries kept / (layers x KV heads x tokens processed)
  double mean_logprob = 0;                        // over generated tokens (NaN when none)
  // mean_logprob - the baseline's, each over its own text (NaN without a baseline). Not the "log-prob gap" the table
  // and `kvscope eval fidelity` show (teacher-forced on the same tokens, full minus policy): that is the fidelity's.
  double logprob_gap = 0;
  int first_divergence = -1;                      // first generated index that differs from the baseline
  double prefill_ms = 0, decode_ms_per_token = 0;
  bool prefill_replayed = false;                  // the prefill was replayed from a capture: prefill_ms is no forward pass
  bool has_baseline = false;
  // The entries at the end as stored (logical: payload, scales, zero points, residual) and, when the run was made
  // with --cache-page N, in pages of N tokens per (layer, KV head) (physical); NaN (page_tokens 0) when absent.
  double entry_bytes = 0, paged_bytes = 0;
  int page_tokens = 0;
};

// The Summary's lines for a run's fidelity to the full cache (label, value as shown): top-1 agreement, KL
// mean, tokens equal before the first disagreement, tokens compared, peak cache saved and the log-prob gap, as
// `kvscope eval fidelity` prints them.
std::vector<std::pair<std::string, std::string>> fidelity_lines(const eval::FidelityResult& fidelity);

// The run's cache at its end against the full cache's (label, value as shown), from the table's own columns
// ("bytes of full", "entries of full"), so the fidelity block cannot contradict the table. (It used to print
// 1 - the teacher-forced fidelity run's bytes / its reference's peak: another run, over other tokens, which read
// "saved 73.7 %" beside "bytes of full 40 %".)
std::pair<std::string, std::string> cache_at_end_line(const RunNumbers& numbers);

// The run's logical and physical bytes (label, value as shown): "entries as stored 1234.5 KiB; in pages of 16
// tokens 1300.0 KiB (+5.3 %)", or without pages "entries as stored 1234.5 KiB (no --cache-page)". Empty label when
// the trace does not record the entries' bytes (traces made before them).
std::pair<std::string, std::string> stored_bytes_line(const RunNumbers& numbers);

// How the table's cache columns are computed, shown under it.
extern const char* const kCacheColumnsLegend;

// The baseline for `run`: a complete full-cache run of the same prompt ids, or nullptr.
const trace::RunTrace* find_baseline(const std::vector<const trace::RunTrace*>& runs, const trace::RunTrace& run);
RunNumbers run_numbers(const trace::RunTrace& run, const trace::RunTrace* baseline);

class Summary final : public Panel {
 public:
  Summary() : Panel("summary", "Summary") {}
  void draw(AppState& state) override;
  Figure figure(const AppState& state) override;
};

}  // namespace kvscope::viewers
