#pragma once
// Sees everything a run does: attention (through AttentionObserver), every cache edit before it is
// applied, and the end of every step. The recorder implements it; so can tests and the GUI.
#include "core/cache/cache_edit.h"
#include "core/cache/kv_cache.h"
#include "core/engine/expert_routing.h"
#include "core/observation/attention_observation.h"
#include "core/observation/step.h"

namespace kvscope::engine {

// The engine speaks the observation vocabulary (core/observation) unqualified.
using observation::AttentionObservation;
using observation::AttentionObserver;
using observation::ObservationRequest;
using observation::Phase;
using observation::StepInfo;

class RunObserver : public AttentionObserver {
 public:
  ObservationRequest request(int, Phase) const override { return {}; }
  // `before` is the cache as the edit found it, so indices in the edit can be resolved to positions.
  virtual void on_edit(const cache::CacheEdit& /*edit*/, const cache::KVCache& /*before*/, const StepInfo& /*step*/) {}
  // `token` is the token sampled from this step's logits (-1 for prefill blocks before the last).
  virtual void on_step_end(const StepInfo& /*step*/, const cache::KVCache& /*cache*/, int /*token*/, float /*logprob*/) {}

  // The next-token logits [vocab] of every step that predicts a token (the last prefill block and each
  // decode step), before sampling or forcing picks the token.
  virtual void on_logits(const StepInfo& /*step*/, const float* /*logits*/, int /*vocab*/) {}

  // Output error against a full cache (CAOTE Fig. 3). When an observer wants it and a policy runs, the
  // engine keeps a shadow cache that receives every K/V row and is never edited, and in each decode step
  // also attends the same queries over it. compressed/full: the layer's attention outputs [n_queries][width]
  // (width = n_heads * head_dim), before the output projection. Costs a second attention and a full cache.
  virtual bool wants_full_cache_output() const { return false; }
  virtual void on_full_cache_output(int /*layer*/, const StepInfo& /*step*/, int /*n_queries*/, int /*width*/,
                                    const float* /*compressed*/, const float* /*full*/) {}
  // Mixture-of-experts models: the experts layer `layer` chose for the tokens at positions first_position ..
  // first_position + n_tokens - 1 of this forward call, n_tokens * k choices row-major, most probable first.
  virtual void on_routing(int /*layer*/, const StepInfo& /*step*/, int /*first_position*/, int /*n_tokens*/, int /*k*/,
                          const ExpertChoice* /*choices*/) {}
};

}  // namespace kvscope::engine
