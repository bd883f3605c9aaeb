#pragma once
// kvpress DecodingPress's hidden-states buffer: between two decode evictions (decode_interval N > 1) each layer keeps
// the per-query rows of the decode steps since its last eviction, and the step that evicts is scored on all of them
// (a scorer that computes queries from the layer's input, or reads them, sees the buffered window). DecodingPress
// trims its buffer to hidden_states_buffer_size (the protocol's decode_buffer, default 256) after every step, so the
// step that compresses adds its own row to at most that many. The prefill's rows are never buffered, and an eviction
// empties the buffer whether or not it removed anything (a budget above the cache).
#include <vector>

#include "core/observation/attention_observation.h"

namespace kvscope::policy {

class DecodeRowBuffer {
 public:
  // Whether `obs` carries per-query rows worth buffering: queries, queries or keys before RoPE, hidden states.
  static bool carries_rows(const observation::AttentionObservation& obs);

  // Empty buffers for `layers` layers, each keeping the rows of at most `earlier_steps` steps between evictions.
  void reset(int layers, int earlier_steps);
  // Appends the per-query rows of `obs` (query positions, the parts above, log-sum-exp) to its layer's buffer.
  void append(const observation::AttentionObservation& obs);
  // After a step that does not evict: keeps the layer's last `earlier_steps` rows (none for 0).
  void trim(int layer);
  // `obs` with its per-query rows replaced by every row buffered for its layer (the current step's last), and the
  // buffer emptied. The attention reductions (column sums, window rows and sums, last row) stay the step's own.
  observation::AttentionObservation take(const observation::AttentionObservation& obs);

 private:
  struct Rows {
    std::vector<int32_t> positions;
    std::vector<float> queries, queries_pre_rope, keys_pre_rope, hidden_states;
    std::vector<std::vector<float>> log_sum_exp;  // [query head][row]
  };
  std::vector<Rows> layers_;
  int earlier_steps_ = 0;
};

}  // namespace kvscope::policy
