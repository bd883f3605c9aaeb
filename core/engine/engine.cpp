#include "core/engine/engine.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "core/common/error.h"
#include "core/engine/decode_threads.h"
#include "core/engine/routed_ffn.h"
#include "core/engine/sliding_window.h"
#include "core/policy/policy.h"
#include "kernels/backend.h"
#include "kernels/common/softmax_math.h"

extern "C" void openblas_set_num_threads(int);

namespace kvscope::engine {

namespace {
// `count` floats of a backend buffer into `out`, for a reader of this layer.
void copy_to_host(kernels::Backend& b, const float* device, std::size_t count, std::vector<float>& out) {
  out.resize(count);
  b.to_host(device, out.data(), count);
}

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

// What happens to q, k and v between their projections and the cache, in transformers' order: biases (Qwen2,
// attention_bias), the per-head RMSNorm of q and k (Qwen3), then RoPE with the model's pairing and scaling.
// Then Gemma's query scale (query_pre_attn_scalar), so that every reader of q sees the scores the model uses.
void finish_qk(kernels::Backend& b, const model::ModelConfig& c, const kernels::ModelShape& rope_shape,
               const model::LayerWeights& lw, int n, const int32_t* positions, kernels::RunState& s,
               const std::function<void()>& before_rope) {
  if (c.qkv_bias) {
    b.add_bias(s.q, lw.bq.data(), n, c.q_width());
    b.add_bias(s.k, lw.bk.data(), n, c.kv_width());
    b.add_bias(s.v, lw.bv.data(), n, c.kv_width());
  }
  if (c.qk_norm) {
    b.rmsnorm(s.q, lw.q_norm.data(), n * c.n_heads, c.head_dim, c.rms_eps, s.q);
    b.rmsnorm(s.k, lw.k_norm.data(), n * c.n_kv_heads, c.head_dim, c.rms_eps, s.k);
  }
  before_rope();
  // Longrope: transformers switches to the long factors for a forward call that reaches past the original context.
  if (!rope_shape.rope_freq_divisors_long.empty() && positions[n - 1] + 1 > rope_shape.rope_long_after) {
    kernels::ModelShape long_rope = rope_shape;
    long_rope.rope_freq_divisors = rope_shape.rope_freq_divisors_long;
    b.rope(s.q, n, c.n_heads, positions, long_rope);
    b.rope(s.k, n, c.n_kv_heads, positions, long_rope);
  } else {
    b.rope(s.q, n, c.n_heads, positions, rope_shape);
    b.rope(s.k, n, c.n_kv_heads, positions, rope_shape);
  }
  if (c.query_scale != 1.0f) b.scale(s.q, static_cast<std::size_t>(n) * c.q_width(), c.query_scale);
}

// Gemma 2's soft-cap of the output logits (host memory).
void cap_logits(float* logits, int n, float cap) {
  if (cap > 0.0f)
    for (int i = 0; i < n; ++i) logits[i] = kernels::softcap(logits[i], cap);
}

void report_routing(const std::vector<RunObserver*>& observers, int layer, const StepInfo& step, int first_position,
                    int n, int k, const std::vector<ExpertChoice>& choices) {
  for (RunObserver* o : observers) o->on_routing(layer, step, first_position, n, k, choices.data());
}

// Hands attention rows to the observers of one layer. Observers that take heads concurrently get rows straight
// from the attention threads; the others one call at a time.
class ObserverRows final : public kernels::AttentionRowSink {
 public:
  ObserverRows(int layer, const std::vector<RunObserver*>& observers) : layer_(layer) {
    for (RunObserver* o : observers) (o->rows_concurrent_across_heads() ? concurrent_ : serialised_).push_back(o);
  }
  bool concurrent_across_heads() const override { return true; }
  void on_rows(int head, int first_row, int n_rows, int n_cols, const float* probs) override {
    for (RunObserver* o : concurrent_) o->on_rows(layer_, head, first_row, n_rows, n_cols, probs);
    if (serialised_.empty()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    for (RunObserver* o : serialised_) o->on_rows(layer_, head, first_row, n_rows, n_cols, probs);
  }

 private:
  int layer_;
  std::vector<RunObserver*> concurrent_, serialised_;
  std::mutex mutex_;
};
}  // namespace

namespace {
std::atomic<bool> adapt_decode_threads{true};
}

void set_threads(int threads, bool adapt_decode) {
  if (threads <= 0) threads = omp_get_max_threads();  // all cores, unless OMP_NUM_THREADS says otherwise
  omp_set_num_threads(threads);
  adapt_decode_threads = adapt_decode;
  // BLAS is called from inside OpenMP regions (one slice per thread); its own threads would compete.
  openblas_set_num_threads(1);
}

struct Engine::Run {
  // max_rows: the most tokens one forward call of this run takes (its prefill block).
  Run(const model::ModelConfig& c, kernels::Backend& backend, kernels::KVCacheTypes cache_type, int max_rows)
      : cache(c.n_layers, c.n_kv_heads, c.head_dim, cache_type, &backend),
        state(backend.make_run_state(c, max_rows)) {}
  cache::KVCache cache;
  std::unique_ptr<cache::KVCache> shadow;  // every K/V row, never edited; only for full-cache-output observers
  std::unique_ptr<kernels::RunState> state;  // scratch for every forward call of the run
  std::vector<float> host_output, host_full_output;  // the shadow comparison's host copies
  // This layer's pre-attention parts a reader asked for (AttentionRequest::pre_attention), for its observation.
  std::vector<float> queries_pre_rope, keys_pre_rope, hidden_states;
  const RunHooks* hooks = nullptr;
  PrefillCapture* capture = nullptr;  // being filled by this run's one-pass prefill
  BlockPrefixCapture* block_prefix = nullptr;  // read and extended by this run's block-wise prefill
  bool cache_edited = false;                   // a policy edit has changed the cache since the run began
  long long layer_rows_from_blocks = 0;        // rows x layers whose input came from block_prefix
  int prompt_tokens = 0;                       // for prefill progress (RunHooks::prefill_layer_progress)
  bool cancelled() const { return hooks && hooks->cancel && hooks->cancel->load(std::memory_order_relaxed); }
};

Engine::Engine(const model::Model& model, kernels::Backend& backend)
    : model_(model), backend_(backend), local_rope_shape_(model.config) {
  backend_.upload_weights(model_.weights);
  // Gemma 3's local layers rotate with their own base and without the global layers' rope scaling.
  if (model.config.rope_local_base > 0.0f) {
    local_rope_shape_.rope_base = model.config.rope_local_base;
    local_rope_shape_.rope_freq_divisors.clear();
    local_rope_shape_.rope_freq_divisors_long.clear();
    local_rope_shape_.rope_attention_factor = 1.0f;
  }
}

const kernels::ModelShape& Engine::rope_shape(int layer) const {
  return model_.config.is_local(layer) ? local_rope_shape_ : model_.config;
}

kernels::AttentionCall Engine::attention_call(int layer, const float* q, int n, const int32_t* positions) const {
  kernels::AttentionCall call{layer, model_.config.n_heads, q, n, positions};
  call.logit_softcap = model_.config.attn_logit_softcap;
  call.sliding_window = model_.config.window_of(layer);
  const std::vector<float>& sinks = model_.weights.layers[layer].sinks;
  if (!sinks.empty()) call.sinks = sinks.data();
  return call;
}

bool Engine::policy_sees(const Run& run, int layer) const {
  const policy::Policy* policy = run.hooks->policy;
  return policy && (!model_.config.is_local(layer) || policy->swa_mode() == policy::SwaMode::Compress);
}

void Engine::trim_to_window(Run& run, int layer, int first_kept, const StepInfo& step) {
  cache::CacheEdit edit = window_trim(run.cache, layer, first_kept);
  if (edit.empty()) return;
  for (RunObserver* o : run.hooks->observers) o->on_edit(edit, run.cache, step);
  run.cache.apply(edit);
}

void Engine::apply_edit(Run& run, cache::CacheEdit&& edit, const StepInfo& step) {
  // A policy that leaves sliding-window layers alone (swa=skip|window) has its edits of them dropped.
  if (!edit.empty() && run.hooks->policy && run.hooks->policy->swa_mode() != policy::SwaMode::Compress)
    std::erase_if(edit.heads, [&](const cache::HeadEdit& h) { return model_.config.is_local(h.layer); });
  if (edit.empty()) return;
  run.cache_edited = true;
  for (RunObserver* o : run.hooks->observers) o->on_edit(edit, run.cache, step);
  run.cache.apply(edit);
}

struct Engine::LayerRequests {
  bool policy_reads = false;  // the policy sees this observation (not when it trimmed before the output)
  ObservationRequest policy, merged;
  std::vector<ObservationRequest> observers;
};

Engine::LayerRequests Engine::requests_for(const Run& run, int layer, Phase phase, bool policy_reads) const {
  LayerRequests r;
  policy::Policy* policy = policy_reads ? run.hooks->policy : nullptr;
  if (!policy_sees(run, layer)) policy = nullptr;
  r.policy_reads = policy != nullptr;
  r.policy = policy ? policy->request(layer, phase) : ObservationRequest{};
  r.merged = r.policy;
  for (RunObserver* o : run.hooks->observers) r.merged.merge(r.observers.emplace_back(o->request(layer, phase)));
  auto wants_window = [](const ObservationRequest& q) { return q.window > 0 && (q.window_sums || q.window_rows); };
  // When windows differ, the widest is computed and narrowed per reader, which needs its rows.
  bool mixed_windows = wants_window(r.policy) && r.policy.window != r.merged.window;
  for (const auto& q : r.observers) mixed_windows = mixed_windows || (wants_window(q) && q.window != r.merged.window);
  if (mixed_windows) r.merged.window_rows = true;
  return r;
}

void Engine::deliver(Run& run, const LayerRequests& requests, const AttentionObservation& obs, const StepInfo& step) {
  if (!requests.merged.any()) return;
  auto wants_window = [](const ObservationRequest& q) { return q.window > 0 && (q.window_sums || q.window_rows); };
  std::optional<AttentionObservation> narrowed_copy;
  auto view_for = [&](const ObservationRequest& r) -> const AttentionObservation& {
    if (!wants_window(r) || std::min(r.window, obs.n_queries()) == obs.window) return obs;
    return narrowed_copy.emplace(observation::narrowed(obs, r.window));
  };
  for (std::size_t i = 0; i < run.hooks->observers.size(); ++i)
    run.hooks->observers[i]->on_observation(view_for(requests.observers[i]));
  if (requests.policy_reads) apply_edit(run, run.hooks->policy->after_layer(view_for(requests.policy), run.cache), step);
}

namespace {
AttentionObservation empty_observation(const model::ModelConfig& c, int layer, const int32_t* positions, int n,
                                       const StepInfo& step) {
  AttentionObservation obs;
  obs.layer = layer;
  obs.phase = step.phase;
  obs.step = step.step;
  obs.prefill_done = step.prefill_done;
  obs.n_heads = c.n_heads;
  obs.n_kv_heads = c.n_kv_heads;
  obs.query_positions.assign(positions, positions + n);
  return obs;
}
}  // namespace

ObservationRequest Engine::pre_attention_request(const Run& run, int layer, Phase phase) const {
  ObservationRequest r = policy_sees(run, layer) ? run.hooks->policy->request(layer, phase) : ObservationRequest{};
  for (RunObserver* o : run.hooks->observers) r.merge(o->request(layer, phase));
  return r;
}

void Engine::attach_pre_attention(const Run& run, const ObservationRequest& request, AttentionObservation& obs) {
  if (request.queries_pre_rope) obs.queries_pre_rope = run.queries_pre_rope;
  if (request.keys_pre_rope) obs.keys_pre_rope = run.keys_pre_rope;
  if (request.hidden_states) obs.hidden_states = run.hidden_states;
}

void Engine::copy_queries(Run& run, int n, AttentionObservation& obs) {
  const std::size_t count = static_cast<std::size_t>(n) * model_.config.q_width();
  obs.queries.resize(count);
  backend_.to_host(run.state->q, obs.queries.data(), count);
}

void Engine::trim_before_output(Run& run, int layer, int n, const int32_t* positions, const StepInfo& step) {
  const auto& c = model_.config;
  policy::Policy* policy = run.hooks->policy;
  AttentionObservation obs = empty_observation(c, layer, positions, n, step);
  const ObservationRequest request = policy->request(layer, step.phase);
  backend_.attention(run.cache.storage(), attention_call(layer, run.state->q, n, positions), request, nullptr, obs,
                     run.state->attn_scratch);
  if (request.queries) copy_queries(run, n, obs);
  attach_pre_attention(run, request, obs);
  apply_edit(run, policy->after_layer(obs, run.cache), step);
}

void Engine::attention(Run& run, int layer, int n, const int32_t* positions, const StepInfo& step) {
  const auto& c = model_.config;
  kernels::RunState& s = *run.state;
  // A policy that trims before the output scores and edits first (one extra attention pass); the output
  // below, and what observers see, then attends over the entries that survived.
  const bool trimmed = policy_sees(run, layer) && run.hooks->policy->trims_before_output(step.phase);
  if (trimmed) trim_before_output(run, layer, n, positions, step);
  const LayerRequests requests = requests_for(run, layer, step.phase, !trimmed);
  const bool capturing = run.capture && step.phase == Phase::Prefill;

  AttentionObservation obs = empty_observation(c, layer, positions, n, step);
  ObserverRows rows(layer, run.hooks->observers);
  const kernels::AttentionCall call = attention_call(layer, s.q, n, positions);
  backend_.attention(run.cache.storage(), call, capturing ? PrefillCapture::superset(requests.merged) : requests.merged,
                     &rows, obs, s.attn_out);
  if (capturing) {
    // Readers see what they asked for, cut from the wider capture exactly as a replay will cut it.
    run.capture->layers[layer].observation = obs;
    obs = restricted(obs, requests.merged);
  }
  if (requests.merged.queries) copy_queries(run, n, obs);
  attach_pre_attention(run, requests.merged, obs);
  if (run.shadow && step.phase == Phase::Decode) {
    AttentionObservation unused;
    backend_.attention(run.shadow->storage(), call, {}, nullptr, unused, s.attn_scratch);
    const std::size_t width = static_cast<std::size_t>(c.q_width());
    run.host_output.resize(n * width);
    run.host_full_output.resize(n * width);
    backend_.to_host(s.attn_out, run.host_output.data(), n * width);
    backend_.to_host(s.attn_scratch, run.host_full_output.data(), n * width);
    for (RunObserver* o : run.hooks->observers)
      if (o->wants_full_cache_output())
        o->on_full_cache_output(layer, step, n, c.q_width(), run.host_output.data(), run.host_full_output.data());
  }
  deliver(run, requests, obs, step);
}

void Engine::replay_prefill(Run& run, const PrefillCapture& capture, const StepInfo& step) {
  const auto& c = model_.config;
  const int n = static_cast<int>(capture.prompt.size());
  for (int l = 0; l < c.n_layers; ++l) {
    if (run.cancelled()) return;
    const LayerRequests requests = requests_for(run, l, Phase::Prefill, true);
    if (!capture.covers(l, requests.merged))
      throw Error("prefill capture of layer " + std::to_string(l) + " cannot serve this run's request (window " +
                  std::to_string(requests.merged.window) + (requests.merged.rows ? ", streamed rows" : "") + ")");
    const PrefillCapture::Layer& cl = capture.layers[l];
    // The capture is host memory; the cache appends from the backend's.
    kernels::RunState& s = *run.state;
    backend_.from_host(cl.keys.data(), s.k, cl.keys.size());
    backend_.from_host(cl.values.data(), s.v, cl.values.size());
    run.cache.append(l, s.k, s.v, n, capture.positions.data());
    if (run.shadow) run.shadow->append(l, s.k, s.v, n, capture.positions.data());
    AttentionObservation obs = restricted(cl.observation, requests.merged);
    obs.step = step.step;
    obs.prefill_done = step.prefill_done;
    deliver(run, requests, obs, step);
    if (c.n_experts > 0) report_routing(run.hooks->observers, l, step, 0, n, c.n_experts_used, cl.routing);
  }
}

void Engine::forward(Run& run, const int* tokens, int n, int first_position, const StepInfo& step, float* logits) {
  const auto& c = model_.config;
  const auto& w = model_.weights;
  kernels::Backend& b = backend_;
  kernels::RunState& s = *run.state;
  if (n > s.max_rows)
    throw Error("internal: a forward call of " + std::to_string(n) + " tokens exceeds the run's scratch of " +
                std::to_string(s.max_rows));
  const std::size_t rows = static_cast<std::size_t>(n);
  std::vector<int32_t> ids(n), positions(n);
  for (int i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
      throw Error("token id " + std::to_string(tokens[i]) + " is outside the vocabulary of " + std::to_string(c.vocab_size));
    ids[i] = tokens[i];
    positions[i] = first_position + i;
  }
  b.embedding_rows(w.token_embedding, ids.data(), n, s.x);
  if (c.embedding_scale != 1.0f) b.scale(s.x, rows * c.dim, c.embedding_scale);

  // A block-wise prefill block that a capture holds is taken from it while the cache stays unedited; one
  // computed while the cache is unedited extends the capture (block_prefix.h).
  BlockPrefixCapture* prefix = step.phase == Phase::Prefill ? run.block_prefix : nullptr;
  const bool prefix_holds = prefix && step.step < prefix->blocks();
  const std::size_t layer_input_size = rows * c.dim;
  std::vector<std::vector<float>> extension;
  std::vector<std::vector<ExpertChoice>> extension_routing;
  std::vector<ExpertChoice> routing;
  bool extending = prefix && !prefix_holds && step.step == prefix->blocks() && !run.cache_edited &&
                   prefix->bytes() + (c.n_layers + 1) * layer_input_size * sizeof(float) <= BlockPrefixCapture::kMaxBytes;
  auto record_input = [&] {
    extending = extending && !run.cache_edited;
    if (!extending) return;
    extension.emplace_back(layer_input_size);
    b.to_host(s.x, extension.back().data(), layer_input_size);
  };

  for (int l = 0; l < c.n_layers; ++l) {
    if (run.cancelled()) return;
    if (step.phase == Phase::Prefill && run.hooks->prefill_layer_progress)
      run.hooks->prefill_layer_progress({l, c.n_layers, first_position, n, run.prompt_tokens});
    const model::LayerWeights& lw = w.layers[l];
    const bool from_prefix = prefix_holds && !run.cache_edited;
    if (from_prefix) b.from_host(prefix->inputs[step.step][l].data(), s.x, layer_input_size);
    record_input();
    b.rmsnorm(s.x, lw.attn_norm.data(), n, c.dim, c.rms_eps, s.xb);
    const ObservationRequest pre = pre_attention_request(run, l, step.phase);
    if (pre.hidden_states) copy_to_host(b, s.xb, static_cast<std::size_t>(n) * c.dim, run.hidden_states);
    const kernels::MatmulTarget qkv[] = {{&lw.wq, s.q}, {&lw.wk, s.k}, {&lw.wv, s.v}};
    b.matmul_shared_input(qkv, s.xb, n);
    finish_qk(b, c, rope_shape(l), lw, n, positions.data(), s, [&] {
      if (pre.queries_pre_rope) copy_to_host(b, s.q, static_cast<std::size_t>(n) * c.q_width(), run.queries_pre_rope);
      if (pre.keys_pre_rope) copy_to_host(b, s.k, static_cast<std::size_t>(n) * c.kv_width(), run.keys_pre_rope);
    });
    const bool local = c.is_local(l);
    if (local) trim_to_window(run, l, first_position + 1 - c.sliding_window, step);
    run.cache.append(l, s.k, s.v, n, positions.data());
    if (run.capture && step.phase == Phase::Prefill) {
      auto& captured = run.capture->layers[l];
      captured.keys.resize(rows * c.kv_width());
      captured.values.resize(rows * c.kv_width());
      b.to_host(s.k, captured.keys.data(), captured.keys.size());
      b.to_host(s.v, captured.values.data(), captured.values.size());
    }
    if (run.shadow) run.shadow->append(l, s.k, s.v, n, positions.data());
    attention(run, l, n, positions.data(), step);
    // Still unedited: the next layer's input is in the capture. Edited in this layer: s.x holds this
    // layer's captured input, and the layer is finished from it.
    if (from_prefix && !run.cache_edited) {
      run.layer_rows_from_blocks += n;
      if (c.n_experts > 0)
        report_routing(run.hooks->observers, l, step, first_position, n, c.n_experts_used,
                       prefix->routing[step.step][l]);
      continue;
    }

    b.matmul(lw.wo, s.attn_out, n, s.proj);
    if (c.o_bias) b.add_bias(s.proj, lw.bo.data(), n, c.dim);
    if (c.post_norms) b.rmsnorm(s.proj, lw.post_attn_norm.data(), n, c.dim, c.rms_eps, s.proj);
    b.add(s.x, s.proj, rows * c.dim);
    b.rmsnorm(s.x, lw.ffn_norm.data(), n, c.dim, c.rms_eps, s.xb);
    if (c.n_experts > 0) {
      routed_ffn(b, c, lw, s, n, routing);
      report_routing(run.hooks->observers, l, step, first_position, n, c.n_experts_used, routing);
      if (run.capture && step.phase == Phase::Prefill) run.capture->layers[l].routing = routing;
      if (extending) extension_routing.push_back(routing);
      continue;
    }
    const kernels::MatmulTarget gate_up[] = {{&lw.w_gate, s.gate}, {&lw.w_up, s.up}};
    b.matmul_shared_input(gate_up, s.xb, n);
    if (c.activation == kernels::ModelShape::Activation::GeluTanh)
      b.geglu(s.gate, s.up, s.gate, rows * c.ffn_dim);
    else
      b.swiglu(s.gate, s.up, s.gate, rows * c.ffn_dim);
    b.matmul(lw.w_down, s.gate, n, s.proj);
    if (c.post_norms) b.rmsnorm(s.proj, lw.post_ffn_norm.data(), n, c.dim, c.rms_eps, s.proj);
    b.add(s.x, s.proj, rows * c.dim);
  }
  if (logits && prefix_holds && !run.cache_edited)
    b.from_host(prefix->inputs[step.step][c.n_layers].data(), s.x, layer_input_size);
  record_input();
  if (extending && !run.cache_edited) {
    prefix->inputs.push_back(std::move(extension));
    prefix->routing.push_back(std::move(extension_routing));
  }
  if (logits) {
    b.rmsnorm(s.x + (rows - 1) * c.dim, w.output_norm.data(), 1, c.dim, c.rms_eps, s.xb);
    b.matmul(w.output, s.xb, 1, s.logits);
    b.to_host(s.logits, logits, c.vocab_size);
    cap_logits(logits, c.vocab_size, c.final_logit_softcap);
  }
}

void Engine::finish_step(Run& run, const StepInfo& step, int token, float logprob) {
  policy::Policy* policy = run.hooks->policy;
  const auto& c = model_.config;
  if (policy) apply_edit(run, policy->after_step(step, run.cache), step);
  // Sliding-window layers drop what the next query cannot see once the policy has acted on the step, so that
  // its observations of the step still match the cache it edits.
  for (int l = 0; l < c.n_layers; ++l)
    if (c.is_local(l)) trim_to_window(run, l, step.seq_len - c.sliding_window, step);
  if (policy) {
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        int expected = policy->expected_length(l, h, step);
        // A sliding-window layer holds its window, which the policy does not decide (swa=skip|window), or
        // at most the policy's length inside it (swa=compress).
        if (c.is_local(l) && policy->swa_mode() != policy::SwaMode::Compress) expected = -1;
        if (expected >= 0 && c.is_local(l)) expected = std::min(expected, run.cache.size(l, h));
        if (expected >= 0 && run.cache.size(l, h) != expected)
          throw Error("policy '" + policy->name() + "' left layer " + std::to_string(l) + " kv head " + std::to_string(h) +
                      " with " + std::to_string(run.cache.size(l, h)) + " entries after " +
                      (step.phase == Phase::Prefill ? "prefill block " : "decode step ") + std::to_string(step.step) +
                      ", but its budget says " + std::to_string(expected));
      }
  }
  for (RunObserver* o : run.hooks->observers) o->on_step_end(step, run.cache, token, logprob);
}

std::vector<int> reported_layer_budgets(const policy::Policy& policy, const model::ModelConfig& config,
                                       int prompt_length) {
  std::vector<int> budgets = policy.layer_budgets();
  if (config.local_layer_count() == 0) return budgets;
  const int window_hold = std::min(config.sliding_window, prompt_length);
  for (int l = 0; l < static_cast<int>(budgets.size()); ++l) {
    budgets[l] = std::min(budgets[l], prompt_length);  // a budget beyond the prompt keeps the prompt
    if (config.is_local(l))
      budgets[l] = policy.swa_mode() == policy::SwaMode::Compress ? std::min(budgets[l], window_hold) : window_hold;
  }
  return budgets;
}

bool prefill_is_policy_independent(const policy::Policy* policy, int prompt_length) {
  if (!policy) return true;
  const int block = policy->prefill_block_size();
  return (block <= 0 || block >= prompt_length) && !policy->trims_before_output(Phase::Prefill);
}

void check_fits_context(std::size_t prompt_tokens, int max_new_tokens, int context_length) {
  if (prompt_tokens == 0) throw UsageError("the prompt is empty");
  if (static_cast<long>(prompt_tokens) + max_new_tokens > context_length)
    throw UsageError("prompt of " + std::to_string(prompt_tokens) + " tokens plus " + std::to_string(max_new_tokens) +
                     " new tokens exceeds the model's context of " + std::to_string(context_length) + " tokens");
}

RunResult Engine::generate(const std::vector<int>& prompt, const GenerateOptions& options, const RunHooks& hooks) {
  const auto& c = model_.config;
  if (prompt.empty()) throw UsageError("the prompt is empty");
  if (options.max_new_tokens < 0) throw UsageError("max new tokens must be >= 0");
  if (!options.forced_tokens.empty() && !options.sample_after_forced &&
      static_cast<int>(options.forced_tokens.size()) < options.max_new_tokens)
    throw UsageError(std::to_string(options.forced_tokens.size()) + " forced tokens cannot cover " +
                     std::to_string(options.max_new_tokens) + " new tokens");
  for (int id : options.forced_tokens)
    if (id < 0 || id >= c.vocab_size)
      throw UsageError("forced token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(c.vocab_size));
  check_fits_context(prompt.size(), options.max_new_tokens, c.context_length);
  if (options.cache_page_tokens != 0) kernels::check_cache_page(options.cache_type, options.cache_page_tokens);
  if (hooks.policy) {
    policy::RunInfo info;
    info.config = c;
    info.prompt_length = static_cast<int>(prompt.size());
    info.budget = options.budget.value > 0 ? options.budget.resolve(info.prompt_length, c.context_length) : info.prompt_length;
    if (options.budget.kind == policy::BudgetSpec::Kind::CompressionRatio) info.compression_ratio = options.budget.value;
    if (hooks.policy->swa_mode() == policy::SwaMode::Window && c.local_layer_count() > 0) {
      info.budget = policy::window_mode_global_budget(info.budget, info.prompt_length, c.n_layers,
                                                      c.local_layer_count(), c.sliding_window);
      if (info.compression_ratio >= 0.0)
        info.compression_ratio = std::max(0.0, 1.0 - static_cast<double>(info.budget) / info.prompt_length);
    }
    info.max_new_tokens = options.max_new_tokens;
    info.weights = &model_.weights;
    hooks.policy->begin(info);
  }
  const int n_prompt = static_cast<int>(prompt.size());
  const int block = hooks.policy && hooks.policy->prefill_block_size() > 0 ? hooks.policy->prefill_block_size() : n_prompt;
  Run run(c, backend_, options.cache_type, std::min(block, n_prompt));
  if (options.cache_page_tokens > 0) run.cache.follow_paged_peak(options.cache_page_tokens);
  run.hooks = &hooks;
  run.prompt_tokens = n_prompt;
  // The shadow is a float32 full cache: what a compressed or quantized cache's attention output is compared with
  // (the error of eviction and of storage together; a full cache in float32 has nothing to compare).
  if (hooks.policy || options.cache_type != kernels::KVCacheTypes(kernels::CacheType::F32))
    for (RunObserver* o : hooks.observers)
      if (o->wants_full_cache_output()) {
        run.shadow = std::make_unique<cache::KVCache>(c.n_layers, c.n_kv_heads, c.head_dim,
                                                      kernels::KVCacheTypes(kernels::CacheType::F32), &backend_);
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
  const bool one_pass = prefill_is_policy_independent(hooks.policy, n_prompt);
  if (hooks.replay) {
    if (hooks.replay->prompt != prompt || !hooks.replay->complete)
      throw Error("prefill capture is of another prompt (or incomplete); it cannot be replayed for this one");
    if (!one_pass)
      throw Error("policy '" + hooks.policy->name() + "' evicts between prefill blocks or before a layer's output; "
                  "a one-pass prefill capture cannot stand in for its prefill");
  }
  if (hooks.block_prefix && !one_pass) {
    hooks.block_prefix->adopt(prompt, block, options.cache_type);
    run.block_prefix = hooks.block_prefix;
  }
  if (hooks.capture && one_pass && !hooks.replay) {
    PrefillCapture& cap = *hooks.capture;
    cap = PrefillCapture{};
    cap.prompt = prompt;
    cap.positions.resize(n_prompt);
    for (int i = 0; i < n_prompt; ++i) cap.positions[i] = i;
    cap.layers.resize(c.n_layers);
    run.capture = &cap;
  }
  auto t0 = std::chrono::steady_clock::now();
  SampledToken next{};
  for (int start = 0, index = 0; start < n_prompt; start += block, ++index) {
    const int n = std::min(block, n_prompt - start);
    StepInfo step{Phase::Prefill, index, start + n, start + n == n_prompt};
    if (hooks.replay) {
      replay_prefill(run, *hooks.replay, step);
      logits = hooks.replay->last_logits;
      result.prefill_replayed = true;
    } else {
      forward(run, prompt.data() + start, n, start, step, step.prefill_done ? logits.data() : nullptr);
    }
    if (run.cancelled()) break;
    if (run.capture && step.prefill_done) {
      run.capture->last_logits = logits;
      run.capture->prefill_ms = elapsed_ms(t0);
      run.capture->complete = true;
    }
    if (step.prefill_done) next = pick(step, 0);
    finish_step(run, step, step.prefill_done ? next.id : -1, step.prefill_done ? next.logprob : 0.0f);
    if (hooks.progress) hooks.progress({Phase::Prefill, start + n, n_prompt});
  }
  result.prefill_ms = elapsed_ms(t0);
  result.prefill_share_from_blocks = static_cast<double>(run.layer_rows_from_blocks) / (static_cast<double>(n_prompt) * c.n_layers);

  auto t1 = std::chrono::steady_clock::now();
  // Each step's team size comes from the steps before it; the caller's is restored however decode ends.
  struct TeamSize {
    int threads = omp_get_max_threads();
    ~TeamSize() { omp_set_num_threads(threads); }
  } team;
  const bool adapt = adapt_decode_threads.load();
  DecodeThreads decode_threads(team.threads);
  int position = n_prompt;
  result.stop_reason = "max_new_tokens";
  for (int i = 0; i < options.max_new_tokens && !run.cancelled(); ++i) {
    result.generated_tokens.push_back(next.id);
    result.logprobs.push_back(next.logprob);
    if (hooks.progress) hooks.progress({Phase::Decode, i + 1, options.max_new_tokens});
    if (options.stop_at_end_of_generation && i >= static_cast<int>(options.forced_tokens.size()) &&
        model_.tokenizer->is_end_of_generation(next.id)) {
      result.stop_reason = "end_of_generation";
      break;
    }
    if (i + 1 == options.max_new_tokens) break;
    StepInfo step{Phase::Decode, i, position + 1, true};
    const int threads = adapt ? decode_threads.next() : team.threads;
    omp_set_num_threads(threads);
    const auto step_start = std::chrono::steady_clock::now();
    forward(run, &next.id, 1, position, step, logits.data());
    decode_threads.record(threads, elapsed_ms(step_start));
    ++result.decode_steps_by_threads[threads];
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
  result.cache_page_tokens = options.cache_page_tokens;
  if (options.cache_page_tokens > 0) {
    result.cache_paged_bytes = run.cache.paged_bytes(options.cache_page_tokens);
    result.cache_paged_peak_bytes = run.cache.paged_peak_bytes();
  }
  for (int l = 0; l < c.n_layers; ++l) {
    result.layer_bytes.push_back(run.cache.layer_bytes(l));
    result.layer_peak_bytes.push_back(run.cache.layer_peak_bytes(l));
    result.layer_entry_bytes.push_back(run.cache.layer_entry_bytes(l));
    if (options.cache_page_tokens > 0) {
      result.layer_paged_bytes.push_back(run.cache.layer_paged_bytes(l, options.cache_page_tokens));
      result.layer_paged_peak_bytes.push_back(run.cache.layer_paged_peak_bytes(l));
    }
    const kernels::KVStorage& storage = run.cache.storage();
    result.key_storage_nmse.push_back(storage.storage_error(l, kernels::KVPart::Keys, false).relative_nmse());
    result.value_storage_nmse.push_back(storage.storage_error(l, kernels::KVPart::Values, false).relative_nmse());
    const kernels::StorageError key_merge = storage.storage_error(l, kernels::KVPart::Keys, true);
    const kernels::StorageError value_merge = storage.storage_error(l, kernels::KVPart::Values, true);
    result.key_merge_nmse.push_back(key_merge.relative_nmse());
    result.value_merge_nmse.push_back(value_merge.relative_nmse());
    result.merges_stored = result.merges_stored || key_merge.reference > 0.0 || value_merge.reference > 0.0;
    std::vector<int> heads;
    for (int h = 0; h < c.n_kv_heads; ++h) heads.push_back(run.cache.size(l, h));
    result.kept.push_back(std::move(heads));
  }
  if (hooks.policy) result.layer_budgets = reported_layer_budgets(*hooks.policy, c, n_prompt);
  return result;
}

std::vector<float> Engine::prompt_logits(const std::vector<int>& prompt, kernels::KVCacheTypes cache_type) {
  if (prompt.empty() || static_cast<int>(prompt.size()) > model_.config.context_length)
    throw UsageError("prompt of " + std::to_string(prompt.size()) + " tokens does not fit the context of " +
                     std::to_string(model_.config.context_length));
  Run run(model_.config, backend_, cache_type, static_cast<int>(prompt.size()));
  RunHooks hooks;
  run.hooks = &hooks;
  std::vector<float> logits(model_.config.vocab_size);
  StepInfo step{Phase::Prefill, 0, static_cast<int>(prompt.size()), true};
  forward(run, prompt.data(), static_cast<int>(prompt.size()), 0, step, logits.data());
  return logits;
}

}  // namespace kvscope::engine
