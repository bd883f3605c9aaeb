#pragma once
// What an attention call is asked to return besides its output, and where those side outputs go. The engine
// merges the requests of the policy and the observers (core/observation calls this ObservationRequest) and
// hands the side outputs to them; the kernels compute only what was asked, on whatever device they run.
#include <cstdint>
#include <vector>

namespace kvscope::kernels {

// Reductions of the probability matrix P[query][key] of one attention call. Requests of several readers are
// merged (max window, any flag).
struct AttentionRequest {
  int window = 0;            // w: how many of the call's last queries form the observation window
  bool column_sums = false;  // per key, the sum of its probability over all of the call's queries
  bool window_sums = false;  // per key, the sum over the window's queries
  bool window_rows = false;  // the window's probability rows themselves
  bool last_row = false;     // the last query's probability row
  bool rows = false;         // every probability row, streamed to the AttentionRowSink
  // per query, log sum_j exp(s_j) over its visible keys (s = q.k / sqrt(d)), plus exp(sink) where the model has
  // a sink logit (gpt-oss), so that p_j = exp(s_j - lse) either way
  bool log_sum_exp = false;
  bool queries = false;      // the call's post-RoPE queries themselves (copied by the engine, not the kernel)
  // Copied by the engine before the call: the step's queries and keys before RoPE (after biases and q/k
  // norms), and the layer's attention input after its norm.
  bool queries_pre_rope = false;
  bool keys_pre_rope = false;
  bool hidden_states = false;

  bool any() const {
    return column_sums || window_sums || window_rows || last_row || rows || log_sum_exp || queries ||
           queries_pre_rope || keys_pre_rope || hidden_states;
  }
  bool pre_attention() const { return queries_pre_rope || keys_pre_rope || hidden_states; }
  void merge(const AttentionRequest& other);
};

// The side outputs of one layer's attention call, on the host. All vectors are per query head; columns are the
// KV head's cache entries in cache order as they were when attention ran (after this call's keys were appended).
// Query head h reads KV head h / (n_heads / n_kv_heads). Only the requested members are filled; the others
// stay empty. Probabilities of keys a query cannot see (causally masked) are 0.
struct AttentionSideOutputs {
  std::vector<int> n_keys;  // per KV head: entries attended to (columns of that head's rows)
  int window = 0;           // queries in the window: min(request.window, n_queries), 0 when not asked
  std::vector<std::vector<float>> column_sums;  // [n_heads][n_keys]
  std::vector<std::vector<float>> window_sums;  // [n_heads][n_keys]
  std::vector<std::vector<float>> window_rows;  // [n_heads][window * n_keys], row-major
  std::vector<std::vector<float>> last_row;     // [n_heads][n_keys]
  std::vector<std::vector<float>> log_sum_exp;  // [n_heads][n_queries], natural log
};

// Receives every probability row when AttentionRequest::rows is set (the recorder's full maps). Rows are host
// memory, valid only during the call. A backend delivers them in blocks of consecutive queries; one head's
// blocks arrive in order. Unless concurrent_across_heads(), calls are serialised. A block's row r has
// probabilities over its first n_cols keys (n_cols may be less than the head's key count: keys no query of the
// block can see are left out). A sink that throws stops the delivery; the backend rethrows after its threads
// have joined.
class AttentionRowSink {
 public:
  virtual ~AttentionRowSink() = default;
  virtual void on_rows(int head, int first_row, int n_rows, int n_cols, const float* probs) = 0;
  virtual bool concurrent_across_heads() const { return false; }
};

}  // namespace kvscope::kernels
