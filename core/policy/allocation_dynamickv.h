#pragma once
// DynamicKV's scores and its global top-k layer allocation (DynamicKV Sec. 4, eqs. 1 and 5-8), shared by the
// `dynamickv` policy (progressive, every m layers) and the one-shot `dynamickv` LayerAllocation.
#include <string>
#include <vector>

#include "core/policy/allocation.h"
#include "core/policy/selection.h"

namespace kvscope::policy::dynamickv {

struct ScoreSettings {
  int window = 8;                        // ws [code: run scripts pass 8]
  int kernel = 7;                        // pooling kernel [code]
  Pooling pooling = Pooling::Avg;        // avgpool for Llama-family models [code]
  GroupReduce reduce = GroupReduce::Mean;  // query heads -> KV head (spec B6-5, gqa_mode=kv_head)
  double r_max = 10.0;                   // bs = r_max * (wt - ws), eq. 2 [code: 10]
  bool code_arithmetic = false;          // eqs. 6-7 as the official code computes them (see below)
};
std::vector<ParamSpec> score_params();
ScoreSettings score_settings(const PolicyParams& params);

// Eq. 1 for one KV head: pooling( sum over the last `window` queries of their attention ), over the keys
// before the window, [0, n_keys - window). Reads obs.window_rows so that a larger window merged in from
// another observer's request does not change the sum. [n_keys - window]
std::vector<float> window_scores(const observation::AttentionObservation& obs, int kv_head, int window, int kernel,
                                 Pooling pooling, GroupReduce reduce);

// Eq. 5: the global top-k over every score of the given layers (all KV heads, all keys), counted per layer.
// Ties go to the earlier layer, head and key, so the counts are deterministic. scores: [layer][kv_head][keys].
std::vector<long> winner_counts(const std::vector<std::vector<std::vector<float>>>& scores, long k);

// Eqs. 6-8. Paper: C_i = count_i / l' (eq. 6), Z_i = floor(bs * C_i / max C) (eq. 7, Alg. 1 line 8).
// Code (code_arithmetic): C_i = count_i // l' (integer), Z_i = floor(bs * C_i / sum C). Then (eq. 8)
// r = sum Z / total, Z_i = floor(Z_i / r), and [code] the last layer seen takes the rounding remainder so
// the budgets sum to `total` = (wt - ws) * L exactly. The two agree up to rounding, but the code's
// rounding steps are about L times coarser (see docs/policies.md).
std::vector<int> normalised_budgets(const std::vector<long>& counts, int buffer_size, long total, bool code_arithmetic);

// The one-shot form: after all layers are observed, a single global top-k distributes (wt - ws) * L
// tokens; each budget is that share plus the window.
class DynamicKVAllocation final : public LayerAllocation {
 public:
  explicit DynamicKVAllocation(ScoreSettings settings) : settings_(settings) {}
  std::string name() const override { return "dynamickv"; }
  observation::ObservationRequest request(int layer) const override;
  void observe(const observation::AttentionObservation& obs) override;
  std::vector<int> budgets(int n_layers, int average_budget, int seq_len) override;
  void publish(Diagnostics& out) const override;

  const std::vector<long>& counts() const { return counts_; }

 private:
  ScoreSettings settings_;
  std::vector<std::vector<std::vector<float>>> scores_;  // [layer][kv_head][keys before the window]
  std::vector<long> counts_;
  std::vector<int> allocation_;
};

}  // namespace kvscope::policy::dynamickv
