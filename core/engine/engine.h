#pragma once
// The Llama forward pass, on whichever compute backend (kernels/backend.h) it is given: prefill in one batched
// pass (or in blocks, for policies that evict while the prompt streams in), then decode one token at a time.
// Policies and observers hook in per layer; they run on the host and see the backend's side outputs.
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/engine/block_prefix.h"
#include "core/observation/attention_observation.h"
#include "core/engine/prefill_capture.h"
#include "core/engine/run_observer.h"
#include "core/engine/sampling.h"
#include "core/observation/step.h"
#include "core/model/model.h"
#include "core/policy/budget_spec.h"
#include "kernels/backend.h"

namespace kvscope::policy {
class Policy;
}

namespace kvscope::engine {

struct GenerateOptions {
  int max_new_tokens = 64;
  SamplingOptions sampling;
  bool stop_at_end_of_generation = true;  // stop at EOS / <|im_end|>
  policy::BudgetSpec budget;              // resolved against the prompt when a policy runs
  // Teacher forcing: when non-empty, decode feeds these tokens instead of sampled ones (the i-th
  // generated token is forced_tokens[i]); max_new_tokens must not exceed its size unless
  // sample_after_forced, which samples the tokens after them (a question appended after the context's
  // compression, then the answer). A forced token never ends the run as an end-of-generation token.
  std::vector<int> forced_tokens;
  bool sample_after_forced = false;
  // How the cache stores keys and values (attention accumulates in float32 either way).
  kernels::KVCacheTypes cache_type = kernels::CacheType::F32;
  // --cache-page N: also count the bytes of the cache in pages of N tokens per (layer, KV head)
  // (RunResult::cache_paged_bytes); 0: not paged. The cache itself is not stored in pages.
  int cache_page_tokens = 0;
};

struct Progress {
  Phase phase = Phase::Prefill;
  int done = 0;   // prompt tokens processed, or tokens generated
  int total = 0;
};

struct LayerProgress {
  int layers_done = 0, n_layers = 0;
  int block_first = 0, block_tokens = 0, prompt_tokens = 0;
  // The share of the prefill done: the blocks before this one, and this block's layers done.
  double fraction() const {
    return prompt_tokens > 0 && n_layers > 0
               ? (block_first + static_cast<double>(block_tokens) * layers_done / n_layers) / prompt_tokens
               : 0.0;
  }
};

struct RunHooks {
  policy::Policy* policy = nullptr;          // nullptr keeps the full cache
  std::vector<RunObserver*> observers;       // the recorder, tests, ...
  std::function<void(const Progress&)> progress;
  // Before each layer of a prefill block: layers done of that block, of how many, the block's first token and
  // its length (and `progress`'s total). A one-pass prefill of a long prompt is one block, and `progress` says
  // nothing until it ends, which can take a minute.
  std::function<void(const LayerProgress&)> prefill_layer_progress;
  const std::atomic<bool>* cancel = nullptr;  // checked between layers; a cancelled run returns early
  // Fill this with the prompt's prefill while running it (prefill_capture.h). Only a one-pass prefill is
  // captured; with a block-wise policy the capture stays incomplete.
  PrefillCapture* capture = nullptr;
  // Replay this capture of the same prompt instead of running the prefill. The policy must prefill in one
  // pass, and no observer may ask for streamed prefill rows (the recorder adopts a run's maps instead).
  const PrefillCapture* replay = nullptr;
  // For a block-wise prefill: take layer inputs from this capture while the run's cache is unedited, and
  // extend it with the unedited blocks this run computes (block_prefix.h). A capture of another prompt or
  // block size is emptied and refilled. Ignored for a one-pass prefill.
  BlockPrefixCapture* block_prefix = nullptr;
};

struct RunResult {
  std::vector<int> prompt_tokens;
  std::vector<int> generated_tokens;
  std::vector<float> logprobs;  // log p of each generated token under the model
  std::string text;             // the decoded continuation
  double prefill_ms = 0.0;
  double decode_ms = 0.0;       // all decode steps together
  // Allocated bytes now and at peak; bytes of the entries themselves; what a full cache would hold.
  std::size_t cache_bytes = 0, cache_peak_bytes = 0, cache_entry_bytes = 0, full_cache_bytes = 0;
  std::vector<std::size_t> layer_bytes, layer_peak_bytes;
  std::vector<std::size_t> layer_entry_bytes;  // cache_entry_bytes per layer (the logical bytes at the end)
  // With GenerateOptions::cache_page_tokens N > 0: the entries at the end in pages of N tokens per (layer, KV
  // head), in all and per layer (the physical bytes of a paged cache), and the same at their largest during the
  // run (a post-prefill policy pages the whole prompt before it compresses); 0 and empty otherwise.
  int cache_page_tokens = 0;
  std::size_t cache_paged_bytes = 0, cache_paged_peak_bytes = 0;
  std::vector<std::size_t> layer_paged_bytes, layer_paged_peak_bytes;
  // Per layer, the relative NMSE of the stored keys and values against the float32 rows they were made from
  // (kernels::KVStorage::storage_error), and of merge results stored again (0 without merges or for f32).
  std::vector<double> key_storage_nmse, value_storage_nmse, key_merge_nmse, value_merge_nmse;
  bool merges_stored = false;  // some merge result was stored in a non-float32 part
  std::vector<std::vector<int>> kept;  // [layers][kv_heads] entries at the end
  std::vector<int> layer_budgets;      // the policy's budgets at the end (empty without a policy)
  bool cancelled = false;
  bool prefill_replayed = false;       // the prefill came from a capture (RunHooks::replay)
  // Share of the prefill's layer work (rows x layers) whose projections and MLP came from a block capture
  // (RunHooks::block_prefix) instead of being computed.
  double prefill_share_from_blocks = 0.0;
  std::string stop_reason;             // "max_new_tokens", "end_of_generation", "context_full", "cancelled"
  std::map<int, int> decode_steps_by_threads;  // threads -> decode steps that ran with that many (decode_threads.h)

  double decode_ms_per_token() const { return generated_tokens.size() > 1 ? decode_ms / (generated_tokens.size() - 1) : 0.0; }
  int prefill_percent_from_blocks() const { return static_cast<int>(100.0 * prefill_share_from_blocks + 0.5); }
};

class Engine {
 public:
  // Runs on `backend` (the process-wide CPU backend by default), which receives the model's weights here.
  explicit Engine(const model::Model& model, kernels::Backend& backend = kernels::default_cpu_backend());

  // Runs the prompt, then generates. Throws UsageError for an empty prompt or one longer than the context.
  RunResult generate(const std::vector<int>& prompt, const GenerateOptions& options, const RunHooks& hooks = {});

  // Final-position logits of a prompt run in one pass with a fresh full cache.
  std::vector<float> prompt_logits(const std::vector<int>& prompt,
                                   kernels::KVCacheTypes cache_type = kernels::CacheType::F32);

  const model::Model& model() const { return model_; }
  kernels::Backend& backend() const { return backend_; }

 private:
  struct Run;
  struct LayerRequests;
  LayerRequests requests_for(const Run& run, int layer, Phase phase, bool policy_reads) const;
  // Hands a layer's observation to the observers and the policy, and applies the policy's edit.
  void deliver(Run& run, const LayerRequests& requests, const AttentionObservation& obs, const StepInfo& step);
  void replay_prefill(Run& run, const PrefillCapture& capture, const StepInfo& step);
  void forward(Run& run, const int* tokens, int n, int first_position, const StepInfo& step, float* logits);
  void attention(Run& run, int layer, int n, const int32_t* positions, const StepInfo& step);
  void trim_before_output(Run& run, int layer, int n, const int32_t* positions, const StepInfo& step);
  // What the policy and the observers ask of a layer before its attention (pre-RoPE queries and keys, hidden
  // states), and those parts copied into an observation that asked for them.
  ObservationRequest pre_attention_request(const Run& run, int layer, Phase phase) const;
  static void attach_pre_attention(const Run& run, const ObservationRequest& request, AttentionObservation& obs);
  // The step's post-RoPE queries into obs.queries, for a reader that asked for them.
  void copy_queries(Run& run, int n, AttentionObservation& obs);
  void finish_step(Run& run, const StepInfo& step, int token, float logprob);
  void apply_edit(Run& run, cache::CacheEdit&& edit, const StepInfo& step);
  // Sliding-window layers (Gemma): the RoPE each layer uses, its attention call (window, soft-cap), whether
  // the policy acts on it (policy::SwaMode), and the drop of entries no query can see any more
  // (sliding_window.h), which observers see as an edit.
  const kernels::ModelShape& rope_shape(int layer) const;
  kernels::AttentionCall attention_call(int layer, const float* q, int n, const int32_t* positions) const;
  bool policy_sees(const Run& run, int layer) const;
  void trim_to_window(Run& run, int layer, int first_kept, const StepInfo& step);

  const model::Model& model_;
  kernels::Backend& backend_;
  kernels::ModelShape local_rope_shape_;
};

// Whether a prompt's forward pass is the same whatever `policy`'s budget: it prefills in one pass and does
// not trim a layer before its output (which would change what the next layer sees). Only then can a
// captured prefill be replayed for it (prefill_capture.h).
bool prefill_is_policy_independent(const policy::Policy* policy, int prompt_length);

// The policy's layer budgets as the cache holds them, for a model with sliding-window layers: at most the
// prompt, and a sliding-window layer keeps min(window, prompt) of it, or the policy's budget inside that under
// swa=compress (policy::SwaMode). Other models: the policy's own numbers.
std::vector<int> reported_layer_budgets(const policy::Policy& policy, const model::ModelConfig& config,
                                        int prompt_length);

// Throws UsageError when an empty prompt, or a prompt and its new tokens, do not fit a context of
// `context_length` tokens: what generate refuses, for callers that check before they write anything.
void check_fits_context(std::size_t prompt_tokens, int max_new_tokens, int context_length);

// Sets the number of threads the kernels and BLAS use (0 = all cores). With adapt_decode, a decode step may
// run with fewer when that is faster (another process sharing the cores: decode_threads.h); without it
// every step uses them all.
void set_threads(int threads, bool adapt_decode = true);

}  // namespace kvscope::engine
