#include "core/observation/attention_observation.h"

#include <algorithm>

#include "core/common/error.h"

namespace kvscope::observation {

AttentionObservation same_step(const AttentionObservation& obs) {
  AttentionObservation out;
  out.layer = obs.layer;
  out.phase = obs.phase;
  out.step = obs.step;
  out.prefill_done = obs.prefill_done;
  out.n_heads = obs.n_heads;
  out.n_kv_heads = obs.n_kv_heads;
  return out;
}

AttentionObservation narrowed(const AttentionObservation& obs, int window) {
  const int w = std::min(window, obs.n_queries());
  if (w == obs.window) return obs;
  if (w > obs.window || obs.window_rows.empty())
    throw Error("attention observation of layer " + std::to_string(obs.layer) + " cannot be narrowed from window " +
                std::to_string(obs.window) + " to " + std::to_string(w) + " without its window rows");
  AttentionObservation out = obs;
  out.window = w;
  const int skip = obs.window - w;
  for (int h = 0; h < obs.n_heads; ++h) {
    const std::size_t n_keys = obs.keys_of(h);
    const auto& rows = obs.window_rows[h];
    out.window_rows[h].assign(rows.begin() + static_cast<std::ptrdiff_t>(skip * n_keys), rows.end());
    if (!out.window_sums.empty()) {
      auto& sums = out.window_sums[h];
      std::fill(sums.begin(), sums.end(), 0.0f);
      for (int r = 0; r < w; ++r)
        for (std::size_t j = 0; j < n_keys; ++j) sums[j] += out.window_rows[h][r * n_keys + j];
    }
  }
  return out;
}

}  // namespace kvscope::observation
