#pragma once
// Runs one evaluation cell: a prompt under one (policy, budget), compared with the full cache on the same
// tokens. Every run goes through run::execute (the one run pipeline), so the CLI subcommands, sweeps and
// their workers all measure the same thing as `kvscope generate`. References (the full-cache side) are
// computed once per prompt and passed to every cell of that prompt; the reference run also captures the
// prompt's prefill, which every cell whose policy prefills in one pass replays (run/prefill_store.h).
#include <atomic>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/eval/evidence.h"
#include "core/eval/evidence_observer.h"
#include "core/eval/metrics.h"
#include "core/model/model.h"
#include "core/run/prefill_store.h"
#include "core/trace/trace_sink.h"

namespace kvscope::eval {

// A cell's compression: a policy spec ("snapkv:window=32", see `kvscope policies`), a budget ("10%",
// "128"; empty: the whole prompt, which only `full` accepts) and how its cache stores keys and values. The
// reference a cell is compared with is always the float32 full cache.
struct CellPolicy {
  std::string policy = "full";
  std::string budget;
  kernels::KVCacheTypes cache_type = kernels::CacheType::F32;
  int cache_page_tokens = 0;  // --cache-page: also count the cache in pages of this many tokens (0: not)
};

// A cell's numbers by name, in column order (the sweep's CSV columns).
using Metrics = std::vector<std::pair<std::string, double>>;

struct CacheMemory {
  std::size_t bytes = 0, peak_bytes = 0;  // the policy's cache at the end and at its largest
  std::size_t full_peak_bytes = 0;        // the full cache's largest, on the same tokens
  // With --cache-page N: the entries at the end as stored (logical) and in pages of N tokens per (layer, KV
  // head) (physical, engine::RunResult::cache_paged_bytes); page_tokens 0: not counted.
  int page_tokens = 0;
  std::size_t entry_bytes = 0, paged_bytes = 0, paged_peak_bytes = 0;  // paged_peak_bytes: paged_bytes at its largest
  double saved() const { return full_peak_bytes ? 1.0 - static_cast<double>(peak_bytes) / full_peak_bytes : 0.0; }
  // The cache at the end against the full cache's (which only grows, so its end is its peak): what the budget
  // kept. A post-prefill policy's peak is the whole prompt, held before it compressed, at every budget.
  double saved_at_end() const { return full_peak_bytes ? 1.0 - static_cast<double>(bytes) / full_peak_bytes : 0.0; }
};

// --- fidelity: teacher-forced on the full cache's greedy continuation ---
// Where the full cache's continuation ends. Sweeps score every cell on the same number of tokens
// (AllNewTokens: an end-of-generation token is fed on like any other); the window compares with its own
// runs, which stop at the model's end of generation, so its reference stops there too (the end token is
// the last token scored) and the policy is teacher-forced over exactly the tokens the baseline shows.
enum class ReferenceEnd { AllNewTokens, AtEndOfGeneration };

struct FidelityReference {
  std::vector<int> prompt, continuation;
  std::string stop_reason = "max_new_tokens";  // or "end_of_generation" (only with ReferenceEnd::AtEndOfGeneration)
  std::vector<std::vector<float>> logprobs;  // [new tokens][vocab], full cache
  std::size_t peak_bytes = 0;
  double run_ms = 0.0;
};
struct FidelityResult {
  FidelityScore score;
  std::string reference_stop_reason;  // the reference's stop_reason: why score.steps tokens were compared
  std::vector<double> layer_nmse;  // attention-output NMSE per layer, mean over decode steps (CAOTE Fig. 3)
  CacheMemory memory;
  double run_ms = 0.0;
  Metrics metrics() const;
};

// --- perplexity: a text streamed through the model, the first prompt_tokens as the prompt ---
struct PplReference {
  std::vector<int> tokens;
  int prompt_tokens = 0;
  std::vector<double> logprobs;  // log p of tokens[prompt_tokens..] under the full cache
  std::size_t peak_bytes = 0;
  double run_ms = 0.0;
};
struct PplResult {
  double ppl = 0.0, ppl_full = 0.0;
  int scored_tokens = 0;
  CacheMemory memory;
  double run_ms = 0.0;
  Metrics metrics() const;
};

// Where a run is recorded besides being scored (eval --traces): a trace sink and what to record
// (trace::RecordOptions). No sink: not recorded.
struct TraceTarget {
  trace::TraceSink* sink = nullptr;
  std::string record;
};

// --- needle: greedy answer after a haystack prompt, exact match of the value ---
struct NeedleReference {
  std::vector<int> prompt;
  std::string value;
  std::vector<EvidenceSpan> evidence;  // the needle's tokens in `prompt` (may be empty)
  bool match = false;  // the full cache's own answer
  std::string answer;  // its text
  std::optional<EvidenceReport> retention;  // the full cache's (set when evidence is)
  std::string run_name;                     // the full cache's run, as in a trace
  int first_answer_step = -1;               // the steps/ row that sampled the first answer token
  std::size_t peak_bytes = 0;
  double run_ms = 0.0;
};
struct NeedleResult {
  bool match = false, full_match = false;
  std::string answer;
  std::optional<EvidenceReport> retention;  // set when the reference has evidence
  std::string run_name;                     // the policy's run, as in a trace
  int first_answer_step = -1;               // the steps/ row that sampled the first answer token
  CacheMemory memory;
  double run_ms = 0.0;
  Metrics metrics() const;
};

// --- answers (LongBench, RULER): a greedy answer after a prompt, scored by the caller ---
struct AnswerRequest {
  std::vector<int> prompt;    // run as the prompt: the policy compresses it
  // Fed token by token after the prompt's compression, before the answer (the query-agnostic protocol: the
  // question is not seen when the context is compressed); empty: the question is in the prompt.
  std::vector<int> appended;
  int max_new_tokens = 32;
  // Token positions of prompt + appended that hold what the answer needs (PreparedPrompt::evidence); may be empty.
  std::vector<EvidenceSpan> evidence{};
};
struct AnswerResult {
  std::vector<int> tokens;  // the answer, without a final end-of-generation token
  std::string text;         // its decoded text
  std::string stop_reason;  // "end_of_generation" or "max_new_tokens"
  CacheMemory memory;
  double run_ms = 0.0;
  // The evidence's retention at the first answer token and where each token first left; empty when the
  // request has no evidence (never a made-up 1.0).
  std::optional<EvidenceReport> retention;
  std::string run_name;        // the run's name, as in a trace ("full", "snapkv_b25pct", ...)
  int first_answer_step = -1;  // the steps/ row that sampled the first answer token (docs/trace-format.md)
};

// A scored answer in a sweep cell (RULER): the policy's score and the full cache's on the same sample (0-1),
// and what the policy kept of the sample's evidence at the first answer token (issue 35): evidence_kept (mean
// over layers and KV heads), evidence_kept_min_layer (the least-keeping layer's share) and evidence_lost (1 when
// under half was kept in at least half the layers), NaN for a sample without evidence (nothing measured).
struct AnswerScore {
  double score = 0.0, full_score = 0.0;
  CacheMemory memory;
  double run_ms = 0.0;
  std::optional<EvidenceRetention> evidence{};
  Metrics metrics() const;
};

// Column names of each kind's metrics, in order; throws UsageError for an unknown kind.
const std::vector<std::string>& metric_names(const std::string& eval_kind);
// The metrics a cell adds after its kind's with --cache-page (CacheMemory's paged counts), in column order.
const std::vector<std::string>& paged_metric_names();
const std::vector<std::string>& eval_kinds();  // fidelity, ppl, needle

// Thrown when Evaluator::cancel was set while a run was in progress; the cell has no result.
class EvalCancelled : public Error {
 public:
  using Error::Error;
};

class Evaluator {
 public:
  // prefills: the store the runs capture into and replay from (the window shares its own, so a live run's
  // prefill serves its fidelity); null: one of the evaluator's own that holds one prompt.
  explicit Evaluator(const model::Model& model, run::PrefillStore* prefills = nullptr);

  FidelityReference fidelity_reference(const std::vector<int>& prompt, int new_tokens,
                                       ReferenceEnd end = ReferenceEnd::AllNewTokens);
  FidelityResult fidelity(const FidelityReference& reference, const CellPolicy& cell);

  // Throws UsageError when the text is not longer than prompt_tokens.
  PplReference ppl_reference(const std::vector<int>& tokens, int prompt_tokens);
  PplResult ppl(const PplReference& reference, const CellPolicy& cell);

  // evidence: the needle's token positions in `prompt` (empty: no retention is measured).
  NeedleReference needle_reference(const std::vector<int>& prompt, const std::string& value, int answer_tokens,
                                   const std::vector<EvidenceSpan>& evidence = {}, const TraceTarget& trace = {});
  NeedleResult needle(const NeedleReference& reference, const CellPolicy& cell, int answer_tokens,
                      const TraceTarget& trace = {});
  // Greedy, stopping at the model's end of generation (as transformers' generate does). full_peak_bytes: the
  // full cache's peak on the same request, for memory.saved() (0: unknown). trace: also record the run there.
  AnswerResult answer(const AnswerRequest& request, const CellPolicy& cell, std::size_t full_peak_bytes = 0,
                      const TraceTarget& trace = {});

  // Called with the engine's progress of every run (prefill blocks, decode steps).
  std::function<void(const engine::Progress&)> progress;
  // Checked between layers; a run that sees it set throws EvalCancelled.
  const std::atomic<bool>* cancel = nullptr;

  const model::Model& model() const { return model_; }
  // Prompt text to token ids, BOS first when the model wants one. `chat`: the text is a chat template's output,
  // so its special tokens are parsed and it carries its own BOS where the template writes one (as
  // run::encode_prompt).
  // parse_special: special-token text in a plain prompt is those tokens (--no-parse-special: false); a rendered
  // chat is always parsed.
  std::vector<int> encode(const std::string& text, bool chat = false, bool parse_special = true) const;
  // Cell runs that replayed their prompt's captured prefill instead of running it.
  std::size_t prefills_reused() const { return prefills_->hits(); }

 private:
  // Every cell scores the same number of tokens unless stop_at_end (answers end where the model ends them).
  // run_name (when given) receives the run's name; trace: where it is recorded too.
  engine::RunResult run(const std::vector<int>& prompt, engine::GenerateOptions options, const CellPolicy& cell,
                        const std::vector<engine::RunObserver*>& observers, double& run_ms, bool stop_at_end = false,
                        const TraceTarget& trace = {}, std::string* run_name = nullptr);

  const model::Model& model_;
  // One prompt at a time: grids run prompt by prompt, and a capture of a long prompt is large.
  run::PrefillStore own_prefills_{1};
  run::PrefillStore* prefills_;
};

}  // namespace kvscope::eval
