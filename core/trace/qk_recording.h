#pragma once
// Collects one engine step's inputs of exact attention (qk_span.h) while the step runs: each layer's post-RoPE
// queries and row log-sum-exp from its observation, and the keys of the step's positions from the cache the
// first time the recorder sees them (the cache an edit receives, or the cache at the end of the step). A key
// is always seen before any edit could merge into it, so the stored key is the one attention first used.
#include <vector>


#include "core/cache/kv_cache.h"
#include "core/observation/attention_observation.h"
#include "core/trace/qk_span.h"

namespace kvscope::trace {

class QKRecording {
 public:
  // Only `layers` (sorted) are kept; the span's other layers stay empty.
  QKRecording(int n_layers, int n_heads, int n_kv_heads, int head_dim, std::vector<int> layers);

  // The step covers positions [first, end); idempotent within a step.
  void begin_step(int first, int end);
  // Queries and log-sum-exp of obs.layer's rows (the observation must carry both).
  void add_observation(const observation::AttentionObservation& obs);
  // An edit of (layer, kv_head) is about to be applied to `before`: keep the step's keys it still holds. A
  // layer edited before its rows attended (a policy trimming before the output) gets NaN log-sum-exp for them:
  // their attention saw a cache the kept mask does not describe.
  void before_edit(const cache::KVCache& before, int layer, int kv_head);
  // The step's end: keeps the keys not seen yet and hands the span over (positions nobody delivered stay NaN,
  // so they read as absent, never as a number).
  QKSpanRef finish_step(const cache::KVCache& cache);

  bool in_step() const { return span_ != nullptr; }

 private:
  void keep_keys(const cache::KVCache& cache, int layer, int kv_head);

  bool records(int layer) const { return layer >= 0 && layer < n_layers_ && recorded_[static_cast<std::size_t>(layer)]; }

  int n_layers_, n_heads_, n_kv_heads_, head_dim_;
  std::vector<bool> recorded_;  // per layer
  std::shared_ptr<QKSpan> span_;
  std::vector<std::vector<bool>> key_seen_;  // [layers][position - first][kv_head]
  std::vector<bool> observed_, edited_before_observed_;  // per layer, this step
};

// The spans of `spans` cut to positions [0, end) (a span that crosses `end` is copied up to it): what a run that
// adopts another run's prefill takes of its q/k.
std::vector<QKSpanRef> qk_spans_before(const std::vector<QKSpanRef>& spans, int end);

}  // namespace kvscope::trace
