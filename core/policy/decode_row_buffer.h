#pragma once
// kvpress DecodingPress's hidden-states buffer: between two decode evictions (decode_interval N > 1) each layer keeps
// the per-query rows of the decode steps since its last eviction, and the step that evicts is scored on all of them
// (a scorer that computes queries from the layer's input, or reads them, sees the buffered window). The buffer holds
// at most kMaxRows rows: DecodingPress trims its buffer to hidden_states_buffer_size (256) after every step, so the
// step that compresses adds its own row to at most 256. The prefill's rows are never buffered, and an eviction
// empties the buffer whether or not it removed anything (a budget above the cache).
#include <vector>

#include "core/observation/attention_observation.h"

namespace kvscope::policy {

class DecodeRowBuffer {
 public:
  static constexpr int kMaxRows = 257;

  // Whether `obs` carries per-query rows worth buffering: queries, queries or keys before RoPE, hidden states.
  static bool carries_rows(const observation::AttentionObservation& obs);

  void reset(int layers);
  // Appends the per-query rows of `obs` (query positions, the parts above, log-sum-exp) to its layer's buffer.
  void append(const observation::AttentionObservation& obs);
  // After a step that does not evict: keeps the layer's last kMaxRows - 1 rows.
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
};

}  // namespace kvscope::policy
