#pragma once
// What a Python scorer's `score(obs)` sees of one layer's step: the attention parts it asked for and the
// cache's rows, as numpy arrays built on first access (copies, valid after the call too) and padded to the
// longest KV head of the layer where heads hold different numbers of entries. docs/policies.md, "Writing a
// policy", lists the attributes.
#include <pybind11/pybind11.h>

#include "core/cache/kv_cache.h"
#include "core/observation/attention_observation.h"

namespace kvscope::policy {

struct PythonObservationContext {
  const observation::AttentionObservation* obs = nullptr;
  cache::KVCache* cache = nullptr;
  int budget = 0;         // the layer's budget, tokens per KV head
  int prompt_length = 0;
  pybind11::object params;  // a dict: every parameter by name, typed
  pybind11::object rope;    // the model's RoPE (python_rope.h)
  pybind11::object q_proj, k_proj;  // the layer's projection weights when the file needs them, else None
};

// A Python object for `context`; call with the GIL held. `finish` writes a changed `obs.state` back to the
// cache's per-entry accumulator and makes further attribute reads raise (the cache moves on).
pybind11::object make_python_observation(const PythonObservationContext& context);
void finish_python_observation(pybind11::object& observation);

}  // namespace kvscope::policy
