#pragma once
// What the engine tells policies and the recorder about one layer's attention in one forward step.
// Attention is computed once, by the engine; everyone else reads these reductions of it.
#include <cstdint>
#include <vector>

#include "kernels/attention_io.h"

namespace kvscope::observation {

enum class Phase { Prefill, Decode };

// Reductions an observer asks for: the kernels' request type (kernels/attention_io.h). Requests of several
// observers are merged (max window, any flag).
using ObservationRequest = kernels::AttentionRequest;

// The backend's side outputs (kernels::AttentionSideOutputs: n_keys, window, column sums, window sums and rows,
// last row, log-sum-exp; per query head, columns in cache order as they were when attention ran, i.e. after this
// step's keys were appended) with the step they belong to. Query heads h share KV head h / group.
struct AttentionObservation : kernels::AttentionSideOutputs {
  int layer = 0;
  Phase phase = Phase::Prefill;
  int step = 0;                       // prefill block index, or decode step index
  bool prefill_done = false;          // the last prefill block, or a decode step
  int n_heads = 0, n_kv_heads = 0;    // query heads, KV heads
  std::vector<int32_t> query_positions;
  std::vector<float> queries;  // [n_queries][n_heads][head_dim] after RoPE, when the request asked for them
  // When asked for: this step's queries [n_queries][n_heads][head_dim] and keys [n_queries][n_kv_heads][head_dim]
  // before RoPE, and the layer's attention input after its norm [n_queries][dim].
  std::vector<float> queries_pre_rope, keys_pre_rope, hidden_states;

  int n_queries() const { return static_cast<int>(query_positions.size()); }
  int kv_head_of(int head) const { return head / (n_heads / n_kv_heads); }
  int keys_of(int head) const { return n_keys[kv_head_of(head)]; }
};

// An observation of the same layer and step (phase, step, prefill_done, head counts) that holds nothing else:
// the start of a view built from some of `obs`'s parts (a subset of its entries, another query set).
AttentionObservation same_step(const AttentionObservation& obs);

// The same observation seen through a smaller window (the last `window` queries): window rows and sums are
// recomputed from the wider window's rows. Several observers may ask for different windows; the engine
// computes the widest and narrows it for each, so nobody silently gets someone else's window.
AttentionObservation narrowed(const AttentionObservation& obs, int window);

// Anyone who wants to see attention (the recorder, analyses). Policies get observations directly.
class AttentionObserver {
 public:
  virtual ~AttentionObserver() = default;
  virtual ObservationRequest request(int layer, Phase phase) const = 0;
  // Probability rows [n_rows][n_cols] of query head `head`, queries first_row.. of this step; keys beyond a
  // row's causal limit are zero. Called block by block from the attention threads; one head's rows arrive
  // in order. Unless rows_concurrent_across_heads(), the calls are serialised.
  virtual void on_rows(int /*layer*/, int /*head*/, int /*first_row*/, int /*n_rows*/, int /*n_cols*/,
                       const float* /*probs*/) {}
  // True when on_rows may run for different heads of a layer at the same time (never for the same head),
  // so the attention threads need not queue for it.
  virtual bool rows_concurrent_across_heads() const { return false; }
  virtual void on_observation(const AttentionObservation& /*obs*/) {}
};

}  // namespace kvscope::observation
