#include "core/engine/engine.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "core/common/error.h"
#include "core/engine/attention_kernel.h"
#include "core/policy/policy.h"
#include "kernels/backend.h"

extern "C" void openblas_set_num_threads(int);

namespace kvscope::engine {

namespace {
double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}
}  // namespace

void set_threads(int threads) {
  if (threads <= 0) threads = omp_get_max_threads();  // all cores, unless OMP_NUM_THREADS says otherwise
  omp_set_num_threads(threads);
  // BLAS is called from inside OpenMP regions (one slice per thread); its own threads would compete.
  openblas_set_num_threads(1);
}

struct Engine::Run {
  explicit Run(const model::ModelConfig& c) : cache(c.n_layers, c.n_kv_heads, c.head_dim) {}
  cache::KVCache cache;
  std::unique_ptr<cache::KVCache> shadow;  // every K/V row, never edited; only for full-cache-output observers
  const RunHooks* hooks = nullptr;
  bool cancelled() const { return hooks && hooks->cancel && hooks->cancel->load(std::memory_order_relaxed); }
};

Engine::Engine(const model::Model& model) : model_(model) {
  // The kernels call BLAS from inside their own OpenMP regions; BLAS threads would only compete.
  openblas_set_num_threads(1);
}

void Engine::apply_edit(Run& run, cache::CacheEdit&& edit, const StepInfo& step) {
  if (edit.empty()) return;
  for (RunObserver* o : run.hooks->observers) o->on_edit(edit, run.cache, step);
  run.cache.apply(edit);
}

void Engine::attention(Run& run, int layer, const float* q, int n, const int32_t* positions, const StepInfo& step,
                       float* out) {
  const auto& c = model_.config;
  policy::Policy* policy = run.hooks->policy;
  const ObservationRequest policy_request = policy ? policy->request(layer, step.phase) : ObservationRequest{};
  ObservationRequest request = policy_request;
  std::vector<ObservationRequest> observer_requests;
  for (RunObserver* o : run.hooks->observers) request.merge(observer_requests.emplace_back(o->request(layer, step.phase)));
  auto wants_window = [](const ObservationRequest& r) { return r.window > 0 && (r.window_sums || r.window_rows); };
  // When windows differ, the widest is computed and narrowed per reader, which needs its rows.
  bool mixed_windows = wants_window(policy_request) && policy_request.window != request.window;
  for (const auto& r : observer_requests) mixed_windows = mixed_windows || (wants_window(r) && r.window != request.window);
  if (mixed_windows) request.window_rows = true;

  AttentionObservation obs;
  obs.layer = layer;
  obs.phase = step.phase;
  obs.step = step.step;
  obs.prefill_done = step.prefill_done;
  obs.n_heads = c.n_heads;
  obs.n_kv_heads = c.n_kv_heads;
  obs.query_positions.assign(positions, positions + n);
  AttentionInputs inputs{c, run.cache, layer, q, n, positions};
  compute_attention(inputs, request, run.hooks->observers, obs, out);
  if (run.shadow && step.phase == Phase::Decode) {
    std::vector<float> full(static_cast<std::size_t>(n) * c.n_heads * c.head_dim);
    AttentionObservation unused;
    compute_attention({c, *run.shadow, layer, q, n, positions}, {}, {}, unused, full.data());
    for (RunObserver* o : run.hooks->observers)
      if (o->wants_full_cache_output()) o->on_full_cache_output(layer, step, n, c.n_heads * c.head_dim, out, full.data());
  }

  if (!request.any()) return;
  std::optional<AttentionObservation> narrowed_copy;
  auto view_for = [&](const ObservationRequest& r) -> const AttentionObservation& {
    if (!wants_window(r) || std::min(r.window, n) == obs.window) return obs;
    return narrowed_copy.emplace(narrowed(obs, r.window));
  };
  for (std::size_t i = 0; i < run.hooks->observers.size(); ++i)
    run.hooks->observers[i]->on_observation(view_for(observer_requests[i]));
  if (policy) apply_edit(run, policy->after_layer(view_for(policy_request), run.cache), step);
}

void Engine::forward(Run& run, const int* tokens, int n, int first_position, const StepInfo& step, float* logits) {
  const auto& c = model_.config;
  const auto& w = model_.weights;
  const int q_dim = c.n_heads * c.head_dim;
  const int kv_dim = c.n_kv_heads * c.head_dim;
  std::vector<float> x(static_cast<std::size_t>(n) * c.dim), xb(x.size()), attn_out(static_cast<std::size_t>(n) * q_dim);
  std::vector<float> q(static_cast<std::size_t>(n) * q_dim), k(static_cast<std::size_t>(n) * kv_dim), v(k.size());
  std::vector<float> gate(static_cast<std::size_t>(n) * c.ffn_dim), up(gate.size()), proj(x.size());
  std::vector<int32_t> positions(n);
  for (int i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
      throw Error("token id " + std::to_string(tokens[i]) + " is outside the vocabulary of " + std::to_string(c.vocab_size));
    kernels::embedding_row(w.token_embedding, tokens[i], &x[static_cast<std::size_t>(i) * c.dim]);
    positions[i] = first_position + i;
  }

  for (int l = 0; l < c.n_layers; ++l) {
    if (run.cancelled()) return;
    const model::LayerWeights& lw = w.layers[l];
    for (int i = 0; i < n; ++i)
      kernels::rmsnorm(&x[static_cast<std::size_t>(i) * c.dim], lw.attn_norm.data(), c.dim, c.rms_eps, &xb[static_cast<std::size_t>(i) * c.dim]);
    kernels::matmul_shared_input({{&lw.wq, q.data()}, {&lw.wk, k.data()}, {&lw.wv, v.data()}}, xb.data(), n);
    // A decode step has one row: a parallel region would only add a barrier for the other threads.
#pragma omp parallel for schedule(static) if (n > 1)
    for (int i = 0; i < n; ++i) {
      kernels::rope(&q[static_cast<std::size_t>(i) * q_dim], c.n_heads, c.head_dim, c.rope_dim, positions[i], c.rope_base, c.rope_style);
      kernels::rope(&k[static_cast<std::size_t>(i) * kv_dim], c.n_kv_heads, c.head_dim, c.rope_dim, positions[i], c.rope_base, c.rope_style);
    }
    run.cache.append(l, k.data(), v.data(), n, positions.data());
    if (run.shadow) run.shadow->append(l, k.data(), v.data(), n, positions.data());
    attention(run, l, q.data(), n, positions.data(), step, attn_out.data());

    kernels::matmul(lw.wo, attn_out.data(), n, proj.data());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    for (int i = 0; i < n; ++i)
      kernels::rmsnorm(&x[static_cast<std::size_t>(i) * c.dim], lw.ffn_norm.data(), c.dim, c.rms_eps, &xb[static_cast<std::size_t>(i) * c.dim]);
    kernels::matmul_shared_input({{&lw.w_gate, gate.data()}, {&lw.w_up, up.data()}}, xb.data(), n);
    kernels::swiglu(gate.data(), up.data(), gate.data(), n * c.ffn_dim);
    kernels::matmul(lw.w_down, gate.data(), n, proj.data());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }
  if (logits) {
    std::vector<float> last(c.dim);
    kernels::rmsnorm(&x[static_cast<std::size_t>(n - 1) * c.dim], w.output_norm.data(), c.dim, c.rms_eps, last.data());
    kernels::matmul(w.output, last.data(), 1, logits);
  }
}

void Engine::finish_step(Run& run, const StepInfo& step, int token, float logprob) {
  policy::Policy* policy = run.hooks->policy;
  if (policy) {
    apply_edit(run, policy->after_step(step, run.cache), step);
    const auto& c = model_.config;
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const int expected = policy->expected_length(l, h, step);
        if (expected >= 0 && run.cache.size(l, h) != expected)
          throw Error("policy '" + policy->name() + "' left layer " + std::to_string(l) + " kv head " + std::to_string(h) +
                      " with " + std::to_string(run.cache.size(l, h)) + " entries after " +
                      (step.phase == Phase::Prefill ? "prefill block " : "decode step ") + std::to_string(step.step) +
                      ", but its budget says " + std::to_string(expected));
      }
  }
  for (RunObserver* o : run.hooks->observers) o->on_step_end(step, run.cache, token, logprob);
}

RunResult Engine::generate(const std::vector<int>& prompt, const GenerateOptions& options, const RunHooks& hooks) {
  const auto& c = model_.config;
  if (prompt.empty()) throw UsageError("the prompt is empty");
  if (options.max_new_tokens < 0) throw UsageError("max new tokens must be >= 0");
  if (!options.forced_tokens.empty() && static_cast<int>(options.forced_tokens.size()) < options.max_new_tokens)
    throw UsageError(std::to_string(options.forced_tokens.size()) + " forced tokens cannot cover " +
                     std::to_string(options.max_new_tokens) + " new tokens");
  for (int id : options.forced_tokens)
    if (id < 0 || id >= c.vocab_size)
      throw UsageError("forced token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(c.vocab_size));
  if (static_cast<long>(prompt.size()) + options.max_new_tokens > c.context_length)
    throw UsageError("prompt of " + std::to_string(prompt.size()) + " tokens plus " + std::to_string(options.max_new_tokens) +
                     " new tokens exceeds the model's context of " + std::to_string(c.context_length) + " tokens");
  if (hooks.policy) {
    policy::RunInfo info;
    info.config = c;
    info.prompt_length = static_cast<int>(prompt.size());
    info.budget = options.budget.value > 0 ? options.budget.resolve(info.prompt_length, c.context_length) : info.prompt_length;
    info.max_new_tokens = options.max_new_tokens;
    hooks.policy->begin(info);
  }
  Run run(c);
  run.hooks = &hooks;
  if (hooks.policy)
    for (RunObserver* o : hooks.observers)
      if (o->wants_full_cache_output()) {
        run.shadow = std::make_unique<cache::KVCache>(c.n_layers, c.n_kv_heads, c.head_dim);
        break;
      }
  RunResult result;
  result.prompt_tokens = prompt;
  Sampler sampler(options.sampling);
  std::vector<float> logits(c.vocab_size);
  // The token that follows these logits: the i-th forced token under teacher forcing, else a sample.
  auto pick = [&](const StepInfo& step, int index) {
    for (RunObserver* o : hooks.observers) o->on_logits(step, logits.data(), c.vocab_size);
    if (index >= static_cast<int>(options.forced_tokens.size())) return sampler.sample(logits.data(), c.vocab_size);
    const int id = options.forced_tokens[index];
    return SampledToken{id, token_logprob(logits.data(), c.vocab_size, id)};
  };
  const int n_prompt = static_cast<int>(prompt.size());

  const int block = hooks.policy && hooks.policy->prefill_block_size() > 0 ? hooks.policy->prefill_block_size() : n_prompt;
  auto t0 = std::chrono::steady_clock::now();
  SampledToken next{};
  for (int start = 0, index = 0; start < n_prompt; start += block, ++index) {
    const int n = std::min(block, n_prompt - start);
    StepInfo step{Phase::Prefill, index, start + n, start + n == n_prompt};
    forward(run, prompt.data() + start, n, start, step, step.prefill_done ? logits.data() : nullptr);
    if (run.cancelled()) break;
    if (step.prefill_done) next = pick(step, 0);
    finish_step(run, step, step.prefill_done ? next.id : -1, step.prefill_done ? next.logprob : 0.0f);
    if (hooks.progress) hooks.progress({Phase::Prefill, start + n, n_prompt});
  }
  result.prefill_ms = elapsed_ms(t0);

  auto t1 = std::chrono::steady_clock::now();
  int position = n_prompt;
  result.stop_reason = "max_new_tokens";
  for (int i = 0; i < options.max_new_tokens && !run.cancelled(); ++i) {
    result.generated_tokens.push_back(next.id);
    result.logprobs.push_back(next.logprob);
    if (hooks.progress) hooks.progress({Phase::Decode, i + 1, options.max_new_tokens});
    if (options.stop_at_end_of_generation && model_.tokenizer->is_end_of_generation(next.id)) {
      result.stop_reason = "end_of_generation";
      break;
    }
    if (i + 1 == options.max_new_tokens) break;
    StepInfo step{Phase::Decode, i, position + 1, true};
    forward(run, &next.id, 1, position, step, logits.data());
    if (run.cancelled()) break;
    ++position;
    next = pick(step, i + 1);
    finish_step(run, step, next.id, next.logprob);
  }
  result.decode_ms = elapsed_ms(t1);
  if (run.cancelled()) {
    result.cancelled = true;
    result.stop_reason = "cancelled";
  }

  result.text = model_.tokenizer->decode(result.generated_tokens);
  result.cache_bytes = run.cache.bytes();
  result.cache_peak_bytes = run.cache.peak_bytes();
  result.cache_entry_bytes = run.cache.entry_bytes();
  result.full_cache_bytes = run.cache.full_cache_bytes(position);
  for (int l = 0; l < c.n_layers; ++l) {
    result.layer_bytes.push_back(run.cache.layer_bytes(l));
    result.layer_peak_bytes.push_back(run.cache.layer_peak_bytes(l));
    std::vector<int> heads;
    for (int h = 0; h < c.n_kv_heads; ++h) heads.push_back(run.cache.size(l, h));
    result.kept.push_back(std::move(heads));
  }
  if (hooks.policy) result.layer_budgets = hooks.policy->layer_budgets();
  return result;
}

std::vector<float> Engine::prompt_logits(const std::vector<int>& prompt) {
  GenerateOptions options;
  options.max_new_tokens = 0;
  Run run(model_.config);
  RunHooks hooks;
  run.hooks = &hooks;
  if (prompt.empty() || static_cast<int>(prompt.size()) > model_.config.context_length)
    throw UsageError("prompt of " + std::to_string(prompt.size()) + " tokens does not fit the context of " +
                     std::to_string(model_.config.context_length));
  std::vector<float> logits(model_.config.vocab_size);
  StepInfo step{Phase::Prefill, 0, static_cast<int>(prompt.size()), true};
  forward(run, prompt.data(), static_cast<int>(prompt.size()), 0, step, logits.data());
  return logits;
}

}  // namespace kvscope::engine
