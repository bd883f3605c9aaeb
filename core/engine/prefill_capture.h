#pragma once
// What a one-pass prefill of a prompt leaves behind that no policy can change: every layer's K/V rows
// (keys after RoPE), a wide observation per layer (column sums over all prompt queries, the last W rows
// and their sums, the last row) from which any policy's prefill request is cut, and the logits of the last
// prompt position. A policy that compresses after computing a layer's attention cannot change that
// layer's attention or any later layer's input, so replaying a capture (RunHooks::replay) gives exactly the
// run a fresh prefill would, in the time selection takes: the live budget slider re-runs only selection and
// decode.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/engine/expert_routing.h"
#include "core/observation/attention_observation.h"

namespace kvscope::engine {

using observation::AttentionObservation;
using observation::ObservationRequest;

struct PrefillCapture {
  // Observation rows kept per layer at least; a request for a wider window than captured needs a new prefill.
  static constexpr int kMinWindow = 64;

  struct Layer {
    std::vector<float> keys, values;  // [n][n_kv_heads][head_dim], as appended to the cache
    AttentionObservation observation;  // column sums, window sums and rows (window >= kMinWindow), last row
    std::vector<ExpertChoice> routing;  // [n][n_experts_used] (mixture-of-experts models; empty otherwise)
  };
  std::vector<int> prompt;
  std::vector<int32_t> positions;      // 0..n-1
  std::vector<Layer> layers;
  std::vector<float> last_logits;      // [vocab], at the last prompt position
  double prefill_ms = 0.0;             // what the captured prefill took
  bool complete = false;               // every layer and the logits are in

  // The reductions a capture computes on top of what the run asked for.
  static ObservationRequest superset(const ObservationRequest& asked);
  // Whether `request` (merged over policy and observers) can be cut from layer `layer`'s observation.
  bool covers(int layer, const ObservationRequest& request) const;
  std::size_t bytes() const;
};

// The observation `request` would have produced, cut from a wider one (a capture's): the same window
// (narrowed() sums rows in the kernel's order, so sums are bit-identical) and only the requested parts.
AttentionObservation restricted(const AttentionObservation& wide, const ObservationRequest& request);

}  // namespace kvscope::engine
