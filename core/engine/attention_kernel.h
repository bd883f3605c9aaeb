#pragma once
// Exact causal attention over the ragged cache, with the side outputs observers asked for. Each query
// attends to the entries of its KV head whose original position is <= its own.
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/observation/attention_observation.h"
#include "core/engine/run_observer.h"
#include "core/model/config.h"

namespace kvscope::engine {

struct AttentionInputs {
  const model::ModelConfig& config;
  const cache::KVCache& cache;
  int layer;
  const float* q;                 // [n][n_heads][head_dim], after RoPE
  int n;                          // queries in this step
  const int32_t* positions;       // [n]
};

// Writes out[n][n_heads][head_dim] and fills obs.n_keys, obs.window and the requested reductions.
void compute_attention(const AttentionInputs& in, const ObservationRequest& request,
                       const std::vector<RunObserver*>& observers, AttentionObservation& obs, float* out);

}  // namespace kvscope::engine
