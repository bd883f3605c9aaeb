#include "core/run/execute.h"

#include <filesystem>

#include "core/common/error.h"
#include "core/policy/budget_spec.h"
#include "core/policy/policy.h"
#include "core/policy/registry.h"
#include "core/run/backends.h"
#include "core/trace/live_trace.h"
#include "core/trace/recorder.h"
#include "core/trace/run_metadata.h"

namespace kvscope::run {

PrefillKey prefill_key(const model::Model& model, const std::vector<int>& prompt, const RunSpec& spec, bool recording) {
  // The model by path and size: a GGUF file's, or the sum over a Hugging Face folder's files.
  std::error_code ec;
  const auto& path = model.path();
  std::uintmax_t size = 0;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(path, ec))
      if (entry.is_regular_file(ec)) size += entry.file_size(ec);
  } else {
    size = std::filesystem::file_size(path, ec);
  }
  PrefillKey key;
  // The backend too: another device's kernels need not give the same bits.
  key.model = path.string() + "#" + std::to_string(ec ? 0 : size) + "@" + kernels::device_name(spec.device);
  // And the cache type: prefill attention reads the rows as stored (rounded or quantized).
  key.model += "/" + kernels::cache_type_name(spec.generation.cache_type);
  key.prompt = prompt;
  if (recording) key.record = trace::RecordOptions::parse(spec.record).to_json();
  return key;
}

namespace {

// Whether every layer's prefill request of this run can be cut from the capture.
bool capture_serves(const engine::PrefillCapture& capture, const policy::Policy* policy,
                    const std::vector<engine::RunObserver*>& observers, int n_layers) {
  for (int l = 0; l < n_layers; ++l) {
    observation::ObservationRequest r = policy ? policy->request(l, observation::Phase::Prefill) : observation::ObservationRequest{};
    for (const auto* o : observers) r.merge(o->request(l, observation::Phase::Prefill));
    if (!capture.covers(l, r)) return false;
  }
  return true;
}

}  // namespace

RunOutcome execute(const RunSpec& spec, const model::Model& model, const RunSinks& sinks) {
  const CheckedSpec checked = check(spec);
  RunOutcome out;
  out.name = checked.run_name;
  out.policy_name = checked.policy_name;
  out.prompt_tokens = spec.prompt_ids.empty()
                          ? encode_prompt_for_run(model, spec.prompt, spec.chat, spec.generation.max_new_tokens)
                          : spec.prompt_ids;
  const std::vector<int>& tokens = out.prompt_tokens;

  auto policy = policy::make_policy(spec.policy);
  engine::GenerateOptions options = spec.generation;
  options.budget = checked.uses_budget ? policy::BudgetSpec::parse(spec.budget) : policy::BudgetSpec{};
  if (checked.uses_budget) options.budget.resolve(static_cast<int>(tokens.size()), model.config.context_length);

  const bool recording = !sinks.traces.empty();
  std::unique_ptr<trace::Recorder> recorder;
  std::vector<trace::TraceSink*> trace_sinks = sinks.traces;
  std::unique_ptr<trace::LiveTrace> products_sink;
  trace::LiveTrace* live = nullptr;
  for (auto* s : sinks.traces)
    if (auto* l = dynamic_cast<trace::LiveTrace*>(s)) live = l;

  // Reuse a captured prefill when the policy prefills in one pass and the capture holds what it will ask
  // for; otherwise capture this run's prefill for the next one.
  const PrefillEntry* reuse = nullptr;
  PrefillEntry* capture = nullptr;
  const bool one_pass = engine::prefill_is_policy_independent(policy.policy.get(), static_cast<int>(tokens.size()));
  if (sinks.prefills && one_pass) {
    const PrefillKey key = prefill_key(model, tokens, spec, recording);
    reuse = sinks.prefills->find(key, recording);
    // The recorder adopts the stored maps, so only the policy's and the other observers' requests count.
    if (reuse && !capture_serves(reuse->capture, policy.policy.get(), sinks.observers, model.config.n_layers))
      reuse = nullptr;
    // A recording run's capture is only worth keeping with its prefill maps: from the caller's live trace,
    // or from one of our own when the store keeps them.
    const bool products_available = !recording || live || sinks.prefills->keep_products();
    if (!reuse && products_available) {
      capture = &sinks.prefills->start(key);
      if (recording && !live) {
        products_sink = std::make_unique<trace::LiveTrace>(std::chrono::hours(24));
        trace_sinks.push_back(products_sink.get());
      }
    }
  }

  // A block-wise prefill takes the blocks computed before any policy edited the cache from the store.
  engine::BlockPrefixCapture* block_prefix = nullptr;
  if (sinks.prefills && !one_pass)
    block_prefix = &sinks.prefills->block_prefix(prefill_key(model, tokens, spec, false).model, tokens,
                                                 policy.policy->prefill_block_size());

  if (recording) {
    trace::RunDescription description;
    description.policy_name = policy.name;
    description.policy_spec = spec.policy;
    description.policy_params = policy.params.as_text();
    description.policy_provenance = policy.provenance;
    description.budget = checked.uses_budget ? spec.budget : "";
    const bool has_text = !spec.prompt.empty() || (spec.chat.enabled && !spec.chat.messages.empty());
    description.prompt = has_text ? prompt_text(model, spec.prompt, spec.chat) : "";
    description.chat = spec.chat.enabled;
    description.prompt_tokens = static_cast<int>(tokens.size());
    description.options = options;
    description.source = spec.source;
    trace::RecordedRun run;
    run.name = out.name;
    run.config = model.config;
    run.tokenizer = model.tokenizer.get();
    run.prompt = tokens;
    run.max_new_tokens = options.max_new_tokens;
    run.policy = policy.policy.get();
    run.metadata = trace::run_metadata(model, description);
    // The recorder says at the end how much a block-wise run took from its block capture.
    run.metadata["prefill"] = reuse ? "replayed from a capture of the same prompt's one-pass prefill" : "computed";
    recorder = std::make_unique<trace::Recorder>(trace::RecordOptions::parse(spec.record), trace_sinks, std::move(run));
  }

  engine::RunHooks hooks;
  hooks.policy = policy.policy.get();
  if (recorder) hooks.observers.push_back(recorder.get());
  for (engine::RunObserver* o : sinks.observers) hooks.observers.push_back(o);
  hooks.progress = sinks.progress;
  hooks.prefill_layer_progress = sinks.prefill_layer_progress;
  hooks.cancel = sinks.cancel;
  if (reuse) {
    if (recorder) recorder->adopt_prefill(*reuse->products);
    hooks.replay = &reuse->capture;
  } else if (capture) {
    hooks.capture = &capture->capture;
  }
  hooks.block_prefix = block_prefix;

  engine::Engine engine(model, backend_for(spec.device));
  out.result = engine.generate(tokens, options, hooks);
  out.prefill_reused = out.result.prefill_replayed;
  out.policy_settings = policy.policy->diagnostics().settings();
  out.policy_warnings = policy.policy->diagnostics().warnings();
  if (recorder && !out.result.cancelled) recorder->finish(out.result);
  if (capture) {
    trace::LiveTrace* products = live ? live : products_sink.get();
    if (!capture->capture.complete || out.result.cancelled)
      sinks.prefills->discard(*capture);
    else if (products)
      capture->products = products->snapshot();
  }
  return out;
}

}  // namespace kvscope::run
