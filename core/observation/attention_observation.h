#pragma once
// What the engine tells policies and the recorder about one layer's attention in one forward step.
// Attention is computed once, by the engine; everyone else reads these reductions of it.
#include <cstdint>
#include <vector>

namespace kvscope::observation {

enum class Phase { Prefill, Decode };

// Reductions an observer asks for. Requests of several observers are merged (max window, any flag).
struct ObservationRequest {
  int window = 0;             // w: how many of the step's last queries form the observation window
  bool column_sums = false;   // per key, the sum of its probability over all of the step's queries
  bool window_sums = false;   // per key, the sum over the window's queries
  bool window_rows = false;   // the window's probability rows themselves
  bool last_row = false;      // the last query's probability row
  bool rows = false;          // every probability row, streamed to AttentionObserver::on_rows

  bool any() const { return column_sums || window_sums || window_rows || last_row || rows; }
  void merge(const ObservationRequest& other);
};

// All vectors are per query head; columns are the KV head's cache entries (in cache order) as they were
// when attention ran, i.e. after this step's keys were appended. Query heads h share KV head h / group.
struct AttentionObservation {
  int layer = 0;
  Phase phase = Phase::Prefill;
  int step = 0;                       // prefill block index, or decode step index
  bool prefill_done = false;          // the last prefill block, or a decode step
  int n_heads = 0, n_kv_heads = 0;    // query heads, KV heads
  std::vector<int32_t> query_positions;
  std::vector<int> n_keys;            // per KV head: entries attended to
  int window = 0;                     // queries in the window (<= query count)
  std::vector<std::vector<float>> column_sums;  // [n_heads][n_keys]
  std::vector<std::vector<float>> window_sums;  // [n_heads][n_keys]
  std::vector<std::vector<float>> window_rows;  // [n_heads][window * n_keys], row-major
  std::vector<std::vector<float>> last_row;     // [n_heads][n_keys]

  int n_queries() const { return static_cast<int>(query_positions.size()); }
  int kv_head_of(int head) const { return head / (n_heads / n_kv_heads); }
  int keys_of(int head) const { return n_keys[kv_head_of(head)]; }
};

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
