#pragma once
// CAKE's arithmetic, shared by the `cake` policy and the `cake` layer allocation: the layer preference
// from the last window's attention (Eq. 4-6), budgets in proportion to it (Eq. 7, 9) and the
// attention-shift tolerant eviction indicator (Eq. 11).
#include <vector>

#include "core/observation/attention_observation.h"
#include "core/policy/selection.h"

namespace kvscope::policy::cake {

// H_l and V_l of Eq. 6 over Obs = A[-S_w:, :-S_w]: the last `rows` (S_w) of the observation's window rows
// (other observers may have asked for a longer window) restricted to the first `prefix` keys, not
// renormalised (as the reference code), summed over every query head.
struct LayerStats {
  double entropy = 0.0;   // Eq. 4: -sum Obs * ln(Obs + 1e-10)
  double variance = 0.0;  // Eq. 5: sum over keys of the unbiased variance over the window rows
};
LayerStats window_stats(const observation::AttentionObservation& obs, int prefix, int rows);

// Which terms of Eq. 6 make the preference: both (the paper), or one alone (the ablation of App. I).
enum class PreferenceTerms { Both, EntropyOnly, VarianceOnly };

// ln P_l = ln(H_l) / tau1 + ln(V_l) / tau2 (Eq. 6), or one of the two terms; -infinity when a term used
// is 0.
double log_preference(const LayerStats& stats, double tau1, double tau2, PreferenceTerms terms = PreferenceTerms::Both);

// Eq. 11 (Mean + gamma * Var) and the indicators Table 3 compares it with: Mean, Var, Mean x Var.
enum class IndicatorForm { MeanPlusVariance, Mean, Variance, Product };
double indicator_value(double mean, double variance, double gamma, IndicatorForm form);

// Eq. 11 for KV head `kv_head` over its first `prefix` keys: Mean + gamma * Var of each key's column in
// the last `rows` window rows of each query head, pooled along the keys, then averaged over the group.
std::vector<float> eviction_indicator(const observation::AttentionObservation& obs, int kv_head, int prefix, int rows,
                                      double gamma, int kernel, Pooling pooling,
                                      IndicatorForm form = IndicatorForm::MeanPlusVariance);

// Real-valued budgets of the layers given: Eq. 9 (Eq. 7 when all layers are given) with each budget at
// most `cap`; the share a capped layer cannot use goes to the others in proportion to P (water-filling).
// Preferences are taken as exp(log_pref); all -infinity means equal preferences.
std::vector<double> budget_shares(const std::vector<double>& log_pref, double total, double cap);

// Integer budgets of one cascade stage. Before the last stage each budget is the ceiling of its share,
// which keeps it at or above every later stage's budget (Proposition 1); the last stage rounds to the
// exact total by largest remainders (ties to the lower layer), so it equals the one-shot allocation.
std::vector<int> stage_budgets(const std::vector<double>& log_pref, long total, int cap, bool last_stage);

}  // namespace kvscope::policy::cake
