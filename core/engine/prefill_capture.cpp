#include "core/engine/prefill_capture.h"

#include <algorithm>

#include "core/common/error.h"

namespace kvscope::engine {

ObservationRequest PrefillCapture::superset(const ObservationRequest& asked) {
  ObservationRequest r = asked;
  r.window = std::max(asked.window, kMinWindow);
  r.column_sums = r.window_sums = r.window_rows = r.last_row = r.log_sum_exp = true;
  return r;
}

bool PrefillCapture::covers(int layer, const ObservationRequest& request) const {
  // Queries are never captured (a whole prompt's would outweigh the rest): a reader of them prefills afresh.
  if (!complete || layer < 0 || layer >= static_cast<int>(layers.size()) || request.rows || request.queries ||
      request.pre_attention())
    return false;
  const AttentionObservation& obs = layers[layer].observation;
  return request.window <= obs.window || obs.window == obs.n_queries();
}

std::size_t PrefillCapture::bytes() const {
  std::size_t n = last_logits.size() * sizeof(float);
  for (const Layer& l : layers) {
    n += (l.keys.size() + l.values.size()) * sizeof(float) + l.routing.size() * sizeof(ExpertChoice);
    for (const auto* part : {&l.observation.column_sums, &l.observation.window_sums, &l.observation.window_rows,
                             &l.observation.last_row, &l.observation.log_sum_exp})
      for (const auto& v : *part) n += v.size() * sizeof(float);
  }
  return n;
}

AttentionObservation restricted(const AttentionObservation& wide, const ObservationRequest& request) {
  const int window = request.window > 0 ? std::min(request.window, wide.n_queries()) : 0;
  if (window > wide.window)
    throw Error("captured observation of layer " + std::to_string(wide.layer) + " has a window of " +
                std::to_string(wide.window) + " queries; " + std::to_string(window) + " were asked for");
  AttentionObservation out = window == 0 ? wide : observation::narrowed(wide, window);
  out.window = window;
  if (window == 0)  // what the kernel leaves for a window of no queries: no rows, sums of nothing
    for (int h = 0; h < out.n_heads; ++h) {
      if (h < static_cast<int>(out.window_rows.size())) out.window_rows[h].clear();
      if (h < static_cast<int>(out.window_sums.size())) out.window_sums[h].assign(out.keys_of(h), 0.0f);
    }
  if (!request.column_sums) out.column_sums.clear();
  if (!request.window_sums) out.window_sums.clear();
  if (!request.window_rows) out.window_rows.clear();
  if (!request.last_row) out.last_row.clear();
  if (!request.log_sum_exp) out.log_sum_exp.clear();
  return out;
}

}  // namespace kvscope::engine
