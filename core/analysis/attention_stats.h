#pragma once
// Statistics of one (layer, query head)'s prefill attention matrix A [S queries][S keys], causal, in
// position space (keys a query could not see, or that were evicted, are 0). Definitions follow the
// papers and their reference code; see /work/shared/specs for the digests.
//
// CAKE (Qin et al., ICLR 2025, Eq. 4-6, with the reference code's choices):
//   Obs = A[S-S_w : S, 0 : S-S_w]  (last S_w queries x the keys before the window, not renormalised)
//   H   = -sum_{i,j} Obs[i,j] * ln(Obs[i,j] + 1e-10)                         (spatial dispersion)
//   V   =  sum_j Var_i(Obs[i,j]),  Var unbiased (divisor S_w - 1)            (temporal shift)
//   The layer values H_l, V_l are these summed over the layer's query heads.
// D2O (Wan et al., Eq. 4):
//   s[j] = sum_i A[i,j];  F_v = population variance of s over j = 0..S-1.
//   The layer value uses s averaged over heads before the variance (D2O digest A6-1).
// Entropy (D2O App. A.9, Eq. 21; the digest's readings (a) and (b)):
//   mean_row_entropy            = (1/S) sum_i H(A[i,:]),  H(p) = -sum p ln p
//   mean_row_entropy_normalized = mean over i >= 1 of H(A[i,:]) / ln(i+1)   (causal row i has i+1 keys)
//   colsum_entropy              = H(s / S)
#include <cstdint>
#include <span>
#include <vector>

namespace kvscope::analysis {

inline constexpr int kCakeWindow = 32;         // S_w, CAKE App. C (following SnapKV)
inline constexpr double kCakeEntropyEps = 1e-10;  // CAKE reference code, inside the log

struct AttentionStats {
  double cake_window_entropy = 0.0;
  double cake_column_variance = 0.0;
  double d2o_colsum_variance = 0.0;
  double mean_row_entropy = 0.0;
  double mean_row_entropy_normalized = 0.0;
  double colsum_entropy = 0.0;
};

// Direct computations on an explicit row-major S x S matrix.
double cake_window_entropy(const float* a, int s, int window);
double cake_column_variance(const float* a, int s, int window);
double d2o_colsum_variance(const float* a, int s);
double mean_row_entropy(const float* a, int s, bool normalized);
double colsum_entropy(const float* a, int s);
AttentionStats attention_stats(const float* a, int s, int window = kCakeWindow);

// Population variance of a vector (D2O's F_v of head-averaged column sums).
double population_variance(std::span<const double> x);

// The same statistics accumulated from rows as the engine streams them (each row once, rows in any
// order, a row possibly in parts), so the S x S matrix is never held. Memory: O(S).
class AttentionStatsAccumulator {
 public:
  explicit AttentionStatsAccumulator(int s, int window = kCakeWindow);
  // Part of query row i: values[k] belongs to key position cols[k], or to key k when cols is empty.
  void add_row(int i, std::span<const float> values, std::span<const int32_t> cols = {});
  // A model with sink logits (gpt-oss): row i's softmax also gave `share` to the sink, which is one more
  // outcome of the row's distribution: its entropy gains -share ln share, and the normalised entropy divides by
  // ln(i + 2) (i + 1 keys and the sink). The column statistics stay over keys.
  void add_sink(int i, double share);
  AttentionStats finish() const;
  // s[j] = sum_i A[i,j], for the layer-level D2O variance.
  const std::vector<double>& column_sums() const {
    fold();
    return column_sums_;
  }

 private:
  // Adds the float partial column sums into the double ones.
  void fold() const;

  int s_, window_, window_start_;
  // Column sums: float partials over at most kFoldRows rows (one vectorised add per value), folded into
  // doubles so a 2048-row sum keeps double precision.
  static constexpr int kFoldRows = 32;
  mutable std::vector<double> column_sums_;
  mutable std::vector<float> partial_sums_;
  mutable int partial_rows_ = 0;
  std::vector<double> row_entropy_;             // per query row (rows may come in parts)
  bool sinks_ = false;                          // add_sink was called: rows have one more outcome
  std::vector<double> window_sum_, window_sq_;  // per key < S - S_w, over the window rows
  double window_entropy_ = 0.0;
};

}  // namespace kvscope::analysis
