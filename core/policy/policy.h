#pragma once
// The policy interface: a policy reads attention observations and the cache, and returns CacheEdits.
// It never moves K/V rows itself (the cache does), and everything it decides is visible to the recorder.
#include <memory>
#include <string>
#include <vector>

#include "core/cache/cache_edit.h"
#include "core/cache/kv_cache.h"
#include "core/model/config.h"
#include "core/observation/attention_observation.h"
#include "core/observation/step.h"
#include "core/policy/diagnostics.h"
#include "core/policy/swa_mode.h"
#include "kernels/model_weights.h"

namespace kvscope::policy {

using observation::AttentionObservation;
using observation::ObservationRequest;
using observation::Phase;

struct RunInfo {
  model::ModelConfig config;
  int prompt_length = 0;
  int budget = 0;                   // tokens per (layer, KV head), resolved from the user's budget
  double compression_ratio = -1.0;  // R when the budget was given as kvpress states it (cr:R), else -1
  int max_new_tokens = 0;
  const kernels::ModelWeights* weights = nullptr;  // the run's model, read-only; null outside an engine run
};

using observation::StepInfo;

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  // What the policy needs to see of attention in each layer and phase.
  virtual ObservationRequest request(int layer, Phase phase) const = 0;
  // Tokens per prefill block; 0 runs the prompt in one exact pass (policies that act after prefill).
  virtual int prefill_block_size() const { return 0; }
  // True when, in steps of `phase`, the policy edits the cache between scoring a layer's step and computing
  // its output (CAOTE Eq. 7): the engine then attends once for the policy's observation, applies the edit
  // returned by after_layer, and computes the output (and observers' views) over what is left.
  virtual bool trims_before_output(Phase /*phase*/) const { return false; }
  virtual void begin(const RunInfo& info) = 0;
  // After a layer's attention in a forward step; an edit returned here is applied at once (cascades).
  virtual cache::CacheEdit after_layer(const AttentionObservation& obs, cache::KVCache& cache) = 0;
  // After all layers of a forward step (post-prefill compression, per-step eviction).
  virtual cache::CacheEdit after_step(const StepInfo& step, cache::KVCache& cache) = 0;
  // The length (layer, kv_head) must have after `step`, or -1 when the policy promises none. The engine
  // checks it after every step, so a policy that silently stops compressing is caught.
  virtual int expected_length(int layer, int kv_head, const StepInfo& step) const = 0;
  // The prompt budget of each layer (for reporting and plotting): the tokens per KV head the layer keeps of the
  // prompt after prefill (per-head allocations: the layer's most or mean, as the policy documents). Tokens
  // generated later are not included, whether they append or are evicted again, so every policy's number
  // means the same; a viewer derives decode growth from the trace's cache contents.
  virtual std::vector<int> layer_budgets() const = 0;
  // Named numbers behind the decisions (allocations, thresholds, ...), for the trace.
  const Diagnostics& diagnostics() const { return diagnostics_; }
  // What the policy does on sliding-window layers (swa_mode.h); the engine enforces it for every policy.
  SwaMode swa_mode() const { return swa_mode_; }
  void set_swa_mode(SwaMode mode) { swa_mode_ = mode; }

 protected:
  Diagnostics diagnostics_;

 private:
  SwaMode swa_mode_ = SwaMode::Skip;
};

}  // namespace kvscope::policy
