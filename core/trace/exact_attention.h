#pragma once
// Attention probabilities rebuilt exactly from a run's recorded post-RoPE queries, keys and row log-sum-exp
// (qk_span.h, docs/trace-format.md `qk/`): any cell of any layer and query head at any zoom, where the pooled
// maps only hold blocks. A cell is
//   p(i, j) = exp(cap(scale * q_i . k_j) - lse_i),  cap(s) = c tanh(s / c) for a soft-capping model (else s)
// over the keys row i attended to: in its step (a prefill block or a decode step), the step's own positions up
// to i (causal) and, before the step, the positions the kept mask holds at the end of the previous step; on a
// sliding-window layer only keys j > i - window.
// Everything else is 0. A cell that cannot be rebuilt exactly reads NaN (absent), never a number: a row whose
// log-sum-exp was not recorded (its layer was edited before it attended), a key an earlier merge had changed
// (any merge event naming it as target, so CaM's value-only merges are absent too), missing data.
#include <vector>

#include "core/trace/attended_keys.h"
#include "core/trace/trace_view.h"

namespace kvscope::trace {

// A rectangle of attention [first_query, first_query + rows * row_block) x [first_key, ...), pooled in blocks
// (1 x 1 = every token). `map` uses Map2D's pooling conventions relative to the rectangle's corner.
struct AttentionRegion {
  int first_query = 0, first_key = 0;
  Map2D map;
};

class ExactAttention {
 public:
  // Throws Error naming what is missing when the run has no q/k, none of this layer (`--record qk=layers:...`), or
  // layer / head are out of range.
  ExactAttention(const RunTrace& run, int layer, int head);

  // Whether the run holds q/k of any layer, and of this one.
  static bool available(const RunTrace& run) { return !run.qk.empty() && run.qk_scale > 0.0; }
  static bool available(const RunTrace& run, int layer) { return available(run) && run.holds_qk(layer); }
  // Why exact attention of `layer` cannot be rebuilt ("" when it can): no q/k at all, or not of this layer.
  static std::string unavailable_reason(const RunTrace& run, int layer);
  // Positions with a recorded query row (the prompt, then one per decode step) and with a recorded key.
  int n_queries() const { return n_positions_; }
  int n_keys() const { return n_positions_; }

  // One cell (see above): a probability, 0, or NaN when it cannot be rebuilt. Throws on positions outside.
  float probability(int query, int key) const;
  // Why a cell is what it is: attended (a probability), after the query (masked), or not in the cache then.
  KeyState key_state(int query, int key) const { return attended_.at(query, key); }
  // The rectangle [q0, q1) x [k0, k1) at full resolution when it is at most max_rows x max_cols, else pooled
  // (max or mean, as the recorded maps pool: cells a row could not see count as 0). A block holding any NaN
  // cell is NaN: part of it is unknown. Throws UsageError for an empty, reversed or out-of-range rectangle.
  AttentionRegion region(int q0, int q1, int k0, int k1, int max_rows, int max_cols, Pooling pooling) const;

 private:
  struct SpanRow {
    const QKSpan::Layer* layer;  // this layer's data in the span holding the position
    std::size_t row;             // the position's row within that span
  };
  SpanRow locate(int position) const;
  const uint16_t* query(int position) const;  // head_dim halves
  const uint16_t* key(int position) const;
  float lse(int position) const;

  const RunTrace& run_;
  int layer_, head_, kv_head_, head_dim_, n_heads_, n_kv_heads_;
  int n_positions_ = 0;
  float scale_;
  float softcap_ = 0.0f;  // Gemma 2's score cap, as the model applied it (run.qk_softcap)
  int window_ = 0;        // the layer's sliding window (0: global), as the model masked it
  std::vector<const QKSpan*> spans_;
  AttendedKeys attended_;          // which keys each row saw (the cache at its step)
  std::vector<int> key_changed_;   // [key position]: first query row that may see a merged key (INT_MAX: never)
};

}  // namespace kvscope::trace
