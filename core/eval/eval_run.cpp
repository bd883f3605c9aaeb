#include "core/eval/eval_run.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "core/analysis/output_error.h"
#include "core/common/error.h"
#include "core/eval/needle.h"
#include "core/run/execute.h"

namespace kvscope::eval {

namespace {

// The reference side of every comparison.
const CellPolicy kFullCache{"full", ""};

// Keeps the log-softmax of every step's next-token logits.
class LogprobRecorder : public engine::RunObserver {
 public:
  void on_logits(const observation::StepInfo&, const float* logits, int vocab) override {
    steps.push_back(log_softmax(logits, vocab));
  }
  std::vector<std::vector<float>> steps;
};

// Mean attention-output NMSE per layer over decode steps, against the engine's shadow full cache.
class LayerNmse : public engine::RunObserver {
 public:
  explicit LayerNmse(int layers) : sum_(layers, 0.0), count_(layers, 0) {}
  bool wants_full_cache_output() const override { return true; }
  void on_full_cache_output(int layer, const observation::StepInfo&, int n_queries, int width, const float* compressed,
                            const float* full) override {
    sum_[layer] += analysis::output_nmse(compressed, full, static_cast<std::size_t>(n_queries) * width);
    ++count_[layer];
  }
  std::vector<double> means() const {
    std::vector<double> out(sum_.size(), 0.0);
    for (std::size_t l = 0; l < sum_.size(); ++l) out[l] = count_[l] ? sum_[l] / count_[l] : 0.0;
    return out;
  }

 private:
  std::vector<double> sum_;
  std::vector<int> count_;
};

CacheMemory memory_of(const engine::RunResult& r, std::size_t full_peak_bytes) {
  CacheMemory m{r.cache_bytes, r.cache_peak_bytes, full_peak_bytes};
  m.page_tokens = r.cache_page_tokens;
  m.entry_bytes = r.cache_entry_bytes;
  m.paged_bytes = r.cache_paged_bytes;
  m.paged_peak_bytes = r.cache_paged_peak_bytes;
  return m;
}

void append_memory(Metrics& m, const CacheMemory& memory, double run_ms) {
  m.insert(m.end(), {{"cache_bytes", static_cast<double>(memory.bytes)},
                     {"cache_peak_bytes", static_cast<double>(memory.peak_bytes)},
                     {"full_cache_peak_bytes", static_cast<double>(memory.full_peak_bytes)},
                     {"memory_saved", memory.saved()},
                     {"run_ms", run_ms}});
  // Only with --cache-page, so that the columns of every sweep made without it stay as they were.
  if (memory.page_tokens > 0) {
    const auto& names = paged_metric_names();
    const std::vector<double> values = {static_cast<double>(memory.page_tokens), static_cast<double>(memory.entry_bytes),
                                        static_cast<double>(memory.paged_bytes), static_cast<double>(memory.paged_peak_bytes)};
    for (std::size_t i = 0; i < names.size(); ++i) m.emplace_back(names[i], values[i]);
  }
}

double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / v.size();
}

std::vector<std::string> names_of(const Metrics& m) {
  std::vector<std::string> out;
  for (const auto& [name, value] : m) out.push_back(name);
  return out;
}

}  // namespace

Metrics FidelityResult::metrics() const {
  Metrics m = {{"top1_agreement", score.top1_agreement},
               {"kl_mean", score.kl_mean},
               {"kl_max", score.kl_max},
               {"logprob_gap", score.logprob_gap},
               {"output_nmse", mean(layer_nmse)},
               {"steps", static_cast<double>(score.steps)},
               {"agreeing_prefix", static_cast<double>(score.agreeing_prefix)}};
  append_memory(m, memory, run_ms);
  return m;
}

Metrics PplResult::metrics() const {
  Metrics m = {{"ppl", ppl},
               {"ppl_full", ppl_full},
               {"ppl_ratio", ppl_full > 0 ? ppl / ppl_full : 0.0},
               {"scored_tokens", static_cast<double>(scored_tokens)}};
  append_memory(m, memory, run_ms);
  return m;
}

Metrics NeedleResult::metrics() const {
  Metrics m = {{"exact_match", match ? 1.0 : 0.0}, {"full_exact_match", full_match ? 1.0 : 0.0}};
  append_memory(m, memory, run_ms);
  return m;
}

Metrics AnswerScore::metrics() const {
  Metrics m = {{"score", score}, {"full_score", full_score}};
  append_memory(m, memory, run_ms);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  m.emplace_back("evidence_kept", evidence ? evidence->mean : nan);
  m.emplace_back("evidence_kept_min_layer", evidence ? evidence->min_layer_kept : nan);
  m.emplace_back("evidence_lost", evidence ? (evidence->mostly_lost() ? 1.0 : 0.0) : nan);
  return m;
}

const std::vector<std::string>& eval_kinds() {
  static const std::vector<std::string> kinds = {"fidelity", "ppl", "needle", "ruler"};
  return kinds;
}

const std::vector<std::string>& paged_metric_names() {
  static const std::vector<std::string> names = {"cache_page_tokens", "cache_entry_bytes", "cache_paged_bytes",
                                                 "cache_paged_peak_bytes"};
  return names;
}

const std::vector<std::string>& metric_names(const std::string& eval_kind) {
  static const std::vector<std::string> fidelity = names_of(FidelityResult{}.metrics());
  static const std::vector<std::string> ppl = names_of(PplResult{}.metrics());
  static const std::vector<std::string> needle = names_of(NeedleResult{}.metrics());
  static const std::vector<std::string> answer = names_of(AnswerScore{}.metrics());
  if (eval_kind == "fidelity") return fidelity;
  if (eval_kind == "ppl") return ppl;
  if (eval_kind == "needle") return needle;
  if (eval_kind == "ruler") return answer;
  throw UsageError("unknown evaluation '" + eval_kind + "'; expected fidelity, ppl, needle or ruler");
}

Evaluator::Evaluator(const model::Model& model, run::PrefillStore* prefills)
    : model_(model), prefills_(prefills ? prefills : &own_prefills_) {}

std::vector<int> Evaluator::encode(const std::string& text, bool chat, bool parse_special) const {
  return chat ? model_.tokenizer->encode(text) : model_.tokenizer->encode_prompt(text, parse_special);
}

engine::RunResult Evaluator::run(const std::vector<int>& prompt, engine::GenerateOptions options,
                                 const CellPolicy& cell, const std::vector<engine::RunObserver*>& observers,
                                 double& run_ms, bool stop_at_end, const TraceTarget& trace, std::string* run_name) {
  run::RunSpec spec;
  spec.policy = cell.policy;
  spec.budget = cell.budget;
  spec.prompt_ids = prompt;
  options.stop_at_end_of_generation = stop_at_end;
  spec.generation = std::move(options);
  spec.generation.cache_type = cell.cache_type;
  spec.generation.cache_page_tokens = cell.cache_page_tokens;
  spec.source = "kvscope eval";
  run::RunSinks sinks;
  if (trace.sink) {
    spec.record = trace.record;
    sinks.traces.push_back(trace.sink);
  }
  sinks.observers = observers;
  sinks.progress = progress;
  sinks.prefills = prefills_;
  sinks.cancel = cancel;
  const auto t0 = std::chrono::steady_clock::now();
  run::RunOutcome outcome = run::execute(spec, model_, sinks);
  run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (outcome.result.cancelled) throw EvalCancelled("evaluation of " + cell.policy + " cancelled");
  if (run_name) *run_name = outcome.name;
  return std::move(outcome.result);
}

FidelityReference Evaluator::fidelity_reference(const std::vector<int>& prompt, int new_tokens, ReferenceEnd end) {
  if (new_tokens < 1) throw UsageError("fidelity needs at least 1 new token");
  engine::GenerateOptions options;
  options.max_new_tokens = new_tokens;
  LogprobRecorder logprobs;
  FidelityReference ref;
  const auto r = run(prompt, options, kFullCache, {&logprobs}, ref.run_ms,
                     /*stop_at_end=*/end == ReferenceEnd::AtEndOfGeneration);
  ref.prompt = prompt;
  ref.continuation = r.generated_tokens;
  ref.stop_reason = r.stop_reason;
  ref.logprobs = std::move(logprobs.steps);
  ref.peak_bytes = r.cache_peak_bytes;
  return ref;
}

FidelityResult Evaluator::fidelity(const FidelityReference& reference, const CellPolicy& cell) {
  engine::GenerateOptions options;
  options.max_new_tokens = static_cast<int>(reference.continuation.size());
  options.forced_tokens = reference.continuation;
  LogprobRecorder logprobs;
  LayerNmse nmse(model_.config.n_layers);
  FidelityResult out;
  const auto r = run(reference.prompt, options, cell, {&logprobs, &nmse}, out.run_ms);
  out.score = score_fidelity(reference.logprobs, logprobs.steps, reference.continuation);
  out.reference_stop_reason = reference.stop_reason;
  out.layer_nmse = nmse.means();
  out.memory = memory_of(r, reference.peak_bytes);
  return out;
}

PplReference Evaluator::ppl_reference(const std::vector<int>& tokens, int prompt_tokens) {
  if (prompt_tokens < 1 || prompt_tokens >= static_cast<int>(tokens.size()))
    throw UsageError("perplexity needs a prompt of 1 to " + std::to_string(static_cast<int>(tokens.size()) - 1) +
                     " tokens of this " + std::to_string(tokens.size()) + "-token text; got " +
                     std::to_string(prompt_tokens));
  PplReference ref;
  ref.tokens = tokens;
  ref.prompt_tokens = prompt_tokens;
  engine::GenerateOptions options;
  options.forced_tokens.assign(tokens.begin() + prompt_tokens, tokens.end());
  options.max_new_tokens = static_cast<int>(options.forced_tokens.size());
  const auto r = run({tokens.begin(), tokens.begin() + prompt_tokens}, options, kFullCache, {}, ref.run_ms);
  ref.logprobs.assign(r.logprobs.begin(), r.logprobs.end());
  ref.peak_bytes = r.cache_peak_bytes;
  return ref;
}

PplResult Evaluator::ppl(const PplReference& reference, const CellPolicy& cell) {
  engine::GenerateOptions options;
  options.forced_tokens.assign(reference.tokens.begin() + reference.prompt_tokens, reference.tokens.end());
  options.max_new_tokens = static_cast<int>(options.forced_tokens.size());
  PplResult out;
  const auto r = run({reference.tokens.begin(), reference.tokens.begin() + reference.prompt_tokens}, options, cell, {},
                     out.run_ms);
  out.ppl = perplexity({r.logprobs.begin(), r.logprobs.end()});
  out.ppl_full = perplexity(reference.logprobs);
  out.scored_tokens = static_cast<int>(r.logprobs.size());
  out.memory = memory_of(r, reference.peak_bytes);
  return out;
}

NeedleReference Evaluator::needle_reference(const std::vector<int>& prompt, const std::string& value, int answer_tokens,
                                            const std::vector<EvidenceSpan>& evidence, const TraceTarget& trace) {
  engine::GenerateOptions options;
  options.max_new_tokens = answer_tokens;
  NeedleReference ref;
  EvidenceObserver watch(evidence, 0, model_.config.n_layers, model_.config.n_kv_heads);
  const auto r = run(prompt, options, kFullCache, {&watch}, ref.run_ms, false, trace, &ref.run_name);
  ref.prompt = prompt;
  ref.value = value;
  ref.evidence = evidence;
  ref.answer = r.text;
  ref.retention = watch.report();
  ref.first_answer_step = watch.first_answer_step();
  ref.match = needle_answer_matches(r.text, value);
  ref.peak_bytes = r.cache_peak_bytes;
  return ref;
}

NeedleResult Evaluator::needle(const NeedleReference& reference, const CellPolicy& cell, int answer_tokens,
                               const TraceTarget& trace) {
  engine::GenerateOptions options;
  options.max_new_tokens = answer_tokens;
  NeedleResult out;
  EvidenceObserver watch(reference.evidence, 0, model_.config.n_layers, model_.config.n_kv_heads);
  const auto r = run(reference.prompt, options, cell, {&watch}, out.run_ms, false, trace, &out.run_name);
  out.answer = r.text;
  out.retention = watch.report();
  out.first_answer_step = watch.first_answer_step();
  out.match = needle_answer_matches(r.text, reference.value);
  out.full_match = reference.match;
  out.memory = memory_of(r, reference.peak_bytes);
  return out;
}

AnswerResult Evaluator::answer(const AnswerRequest& request, const CellPolicy& cell, std::size_t full_peak_bytes,
                               const TraceTarget& trace) {
  if (request.max_new_tokens < 1) throw UsageError("an answer needs at least 1 new token");
  engine::GenerateOptions options;
  options.forced_tokens = request.appended;
  options.sample_after_forced = true;
  options.max_new_tokens = static_cast<int>(request.appended.size()) + request.max_new_tokens;
  AnswerResult out;
  EvidenceObserver watch(request.evidence, static_cast<int>(request.appended.size()), model_.config.n_layers,
                         model_.config.n_kv_heads);
  const auto r = run(request.prompt, options, cell, {&watch}, out.run_ms, /*stop_at_end=*/true, trace, &out.run_name);
  out.retention = watch.report();
  out.first_answer_step = watch.first_answer_step();
  out.tokens.assign(r.generated_tokens.begin() + std::min(request.appended.size(), r.generated_tokens.size()),
                    r.generated_tokens.end());
  out.stop_reason = r.stop_reason;
  if (r.stop_reason == "end_of_generation" && !out.tokens.empty()) out.tokens.pop_back();
  out.text = model_.tokenizer->decode(out.tokens);
  out.memory = memory_of(r, full_peak_bytes ? full_peak_bytes : r.cache_peak_bytes);
  return out;
}

}  // namespace kvscope::eval
