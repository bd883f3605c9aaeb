#pragma once
// D2O's layer-level operation (D2O Sec. 4.1): layers whose prefill attention columns vary little ("dense"
// attention) receive larger budgets through an inverse-variance softmax. Used by the `d2o` policy and as
// the `d2o` LayerAllocation for any scorer.
#include <string>
#include <vector>

#include "core/policy/allocation.h"

namespace kvscope::policy::d2o {

// How F_v enters the softmax of eq. 5. The literal exp(-F_v) degenerates because F_v grows with the
// prompt length (spec A6-2), hence the scale-free alternatives; `relative` is the default.
// `ExpDecay` is Table 4's third strategy, alpha_l = exp(-F_v^l): not a share, so the total is not kept.
enum class AllocNorm { Relative, Raw, PerN, ZScore, Reciprocal, Uniform, ExpDecay };
AllocNorm parse_variance_norm(const std::string& name);

// Eq. 4 leaves the head index out: `head_mean` takes the variance of the head-mean column sums (Fig. 1
// averages heads), `per_head` averages each head's variance.
enum class VarianceMode { HeadMean, PerHead };
VarianceMode parse_variance_mode(const std::string& name);

// Eq. 4: F_v = Var_j(s[j]) with s[j] = sum_i A[i, j], population variance over the n key columns.
// column_sums: [query heads][n_keys]. Heads with different key counts (a ragged cache) fall back to
// per-head variance because a head mean over different columns means nothing.
double column_sum_variance(const std::vector<std::vector<float>>& column_sums, VarianceMode mode);

// The normalised weights alpha_l / (L * rho) of eq. 5 (they sum to 1); for ExpDecay, exp(-F_v^l / T) itself.
std::vector<double> layer_shares(const std::vector<double>& variances, AllocNorm norm, double temperature, int seq_len);

struct AllocationSettings {
  AllocNorm norm = AllocNorm::Relative;
  VarianceMode variance = VarianceMode::HeadMean;
  double temperature = 1.0;
  int min_layer_tokens = 12;  // alpha_min * n of spec A6-2: T + 8 with T = 4 sinks
};
// The parameters shared by the `d2o` policy and the `d2o` allocation.
std::vector<ParamSpec> allocation_params();
AllocationSettings allocation_settings(const PolicyParams& params);

// S_l = alpha_l * n (eq. 5), clamped to [min(min_layer_tokens, average), seq_len] with the excess
// water-filled so that sum_l S_l = L * average exactly (largest remainder, spec A6-2/A6-3). `reserved`
// tokens of every layer (a scorer's observation window) stay outside the softmax: only the budget above
// them is shared out, as the pyramid allocation does.
std::vector<int> layer_budgets_from_shares(const std::vector<double>& shares, int average_budget, int seq_len,
                                           int min_layer_tokens, int reserved = 0);

// Table 4's exponential decay, alpha_l = rho * exp(-F_v^l) (see docs/policies.md for the rho): each budget
// above `reserved` is round((average - reserved) * factor_l), clamped to the same floor and cap as above. The
// budgets sum to at most L * average; every layer keeps at most the uniform budget.
std::vector<int> layer_budgets_from_factors(const std::vector<double>& factors, int average_budget, int seq_len,
                                            int min_layer_tokens, int reserved = 0);

class D2OAllocation final : public LayerAllocation {
 public:
  explicit D2OAllocation(AllocationSettings settings) : settings_(settings) {}
  std::string name() const override { return "d2o"; }
  observation::ObservationRequest request(int layer) const override;
  void observe(const observation::AttentionObservation& obs) override;
  std::vector<int> budgets(int n_layers, int average_budget, int seq_len) override;
  void publish(Diagnostics& out) const override;

  // D2O App. A.9, Eq. 17: one budget per (layer, KV head), from the softmax over every head's F_v^{l,h}
  // (Eq. 20), summing to L * H * average. [layer][kv_head]
  std::vector<std::vector<int>> head_budgets(int n_layers, int average_budget, int seq_len);

  void reset() {
    variances_.clear();
    head_variances_.clear();
    shares_.clear();
  }
  // What the last budgets() call was based on, for diagnostics.
  const std::vector<double>& variances() const { return variances_; }
  const std::vector<double>& shares() const { return shares_; }

 private:
  AllocationSettings settings_;
  std::vector<double> variances_;                    // F_v^l in layer order
  std::vector<std::vector<double>> head_variances_;  // F_v^{l,h} per KV head (Eq. 20 over its query heads)
  std::vector<double> shares_;                       // per layer, or per (layer, KV head) after head_budgets
};

}  // namespace kvscope::policy::d2o
