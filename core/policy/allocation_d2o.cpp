// D2O layer budgets: inverse-variance softmax over the variance of each layer's attention-column sums
// (D2O eq. 4-5), with the normalisations of spec A6-2 because the literal form gives ~all budget to 1-3 layers.
#include "core/policy/allocation_d2o.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/analysis/attention_stats.h"
#include "core/common/error.h"
#include "core/policy/allocation_catalog.h"

namespace kvscope::policy::d2o {

AllocNorm parse_variance_norm(const std::string& name) {
  if (name == "relative") return AllocNorm::Relative;
  if (name == "raw") return AllocNorm::Raw;
  if (name == "per_n") return AllocNorm::PerN;
  if (name == "zscore") return AllocNorm::ZScore;
  if (name == "reciprocal") return AllocNorm::Reciprocal;
  if (name == "uniform") return AllocNorm::Uniform;
  if (name == "exp_decay") return AllocNorm::ExpDecay;
  throw UsageError("d2o variance_norm '" + name +
                   "': expected relative, raw, per_n, zscore, reciprocal, uniform or exp_decay");
}

VarianceMode parse_variance_mode(const std::string& name) {
  if (name == "head_mean") return VarianceMode::HeadMean;
  if (name == "per_head") return VarianceMode::PerHead;
  throw UsageError("d2o variance_heads '" + name + "': expected head_mean or per_head");
}

namespace {

// Log-sum-exp softmax: raw F_v reaches the hundreds, where exp(-F_v) underflows even in double.
std::vector<double> softmax(const std::vector<double>& logits) {
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> w(logits.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) sum += w[i] = std::exp(logits[i] - top);
  for (double& v : w) v /= sum;
  return w;
}

}  // namespace

double column_sum_variance(const std::vector<std::vector<float>>& column_sums, VarianceMode mode) {
  if (column_sums.empty()) return 0.0;
  const std::size_t n = column_sums.front().size();
  bool ragged = false;
  for (const auto& head : column_sums) ragged = ragged || head.size() != n;
  if (mode == VarianceMode::HeadMean && !ragged) {
    std::vector<double> mean(n, 0.0);
    for (const auto& head : column_sums)
      for (std::size_t j = 0; j < n; ++j) mean[j] += head[j];
    for (double& v : mean) v /= static_cast<double>(column_sums.size());
    return analysis::population_variance(mean);
  }
  double total = 0.0;
  for (const auto& head : column_sums) total += analysis::population_variance(std::vector<double>(head.begin(), head.end()));
  return total / static_cast<double>(column_sums.size());
}

std::vector<double> layer_shares(const std::vector<double>& variances, AllocNorm norm, double temperature, int seq_len) {
  const std::size_t L = variances.size();
  if (L == 0) return {};
  if (norm == AllocNorm::Uniform) return std::vector<double>(L, 1.0 / static_cast<double>(L));  // "w.o. layer op"
  if (norm == AllocNorm::ExpDecay) {
    // Table 4 (3): alpha_l = exp(-F_v^l), the literal F_v, no normalisation across layers.
    std::vector<double> w(L);
    for (std::size_t l = 0; l < L; ++l) w[l] = std::exp(-variances[l] / temperature);
    return w;
  }
  if (norm == AllocNorm::Reciprocal) {
    // Table 4's reciprocal variant; a zero variance (perfectly uniform columns) would take everything,
    // so it is floored at a tiny positive number.
    std::vector<double> w(L);
    double sum = 0.0;
    for (std::size_t l = 0; l < L; ++l) sum += w[l] = 1.0 / std::max(variances[l], 1e-12);
    for (double& v : w) v /= sum;
    return w;
  }
  double mean = 0.0;
  for (double v : variances) mean += v;
  mean /= static_cast<double>(L);
  double sd = 0.0;
  for (double v : variances) sd += (v - mean) * (v - mean);
  sd = std::sqrt(sd / static_cast<double>(L));
  std::vector<double> logits(L);
  for (std::size_t l = 0; l < L; ++l) {
    double f = variances[l];
    switch (norm) {
      case AllocNorm::Raw: break;
      case AllocNorm::Relative: f = mean > 0.0 ? f / mean : 0.0; break;
      case AllocNorm::PerN: f = seq_len > 1 ? f / (seq_len - 1) : f; break;
      case AllocNorm::ZScore: f = sd > 0.0 ? (f - mean) / sd : 0.0; break;
      default: break;
    }
    logits[l] = -f / temperature;  // eq. 5: exp(-F_v^l) / sum_l' exp(-F_v^l')
  }
  return softmax(logits);
}

std::vector<int> layer_budgets_from_shares(const std::vector<double>& shares, int average_budget, int seq_len,
                                           int min_layer_tokens, int reserved) {
  const int L = static_cast<int>(shares.size());
  const int cap = std::max(seq_len, 1);
  const int average = std::clamp(average_budget, 1, cap);
  if (reserved <= 0 || reserved >= average) {
    const int floor_each = std::clamp(std::min(min_layer_tokens, average), 1, cap);
    // sum_l S_l = rho * L * S with S = n (eq. 5 and its derivation, eqs. 13-16).
    return proportional_budgets(shares, static_cast<long>(L) * average, floor_each, cap);
  }
  const int floor_each = std::clamp(min_layer_tokens - reserved, 0, average - reserved);
  std::vector<int> out =
      proportional_budgets(shares, static_cast<long>(L) * (average - reserved), floor_each, std::max(cap - reserved, 0));
  for (int& b : out) b += reserved;
  return out;
}

std::vector<int> layer_budgets_from_factors(const std::vector<double>& factors, int average_budget, int seq_len,
                                            int min_layer_tokens, int reserved) {
  const int cap = std::max(seq_len, 1);
  const int average = std::clamp(average_budget, 1, cap);
  const int r = reserved < average ? std::max(reserved, 0) : 0;
  const int floor_each = std::clamp(std::min(min_layer_tokens, average) - r, r > 0 ? 0 : 1, average - r);
  std::vector<int> out;
  for (double f : factors)
    out.push_back(r + std::clamp(static_cast<int>(std::lround((average - r) * f)), floor_each, cap - r));
  return out;
}

std::vector<ParamSpec> allocation_params() {
  return {
      ParamSpec::choice("variance_norm", "relative",
                        {"relative", "raw", "per_n", "zscore", "reciprocal", "uniform", "exp_decay"},
                        "eq. 5 input: F_v/mean_l F_v (default, spec A6-2), literal F_v, F_v/(n-1), z-score, "
                        "reciprocal 1/F_v (Table 4), uniform (Table 6 'w.o. layer op') or exp_decay: Table 4's "
                        "exponential decay, b_l = b * exp(-F_v^l / T), not normalised, so the total falls below L*b"),
      ParamSpec::real("variance_temperature", 1.0, 1e-3, 1e3, "softmax temperature on the normalised F_v of eq. 5"),
      ParamSpec::choice(
          "variance_heads", "head_mean", {"head_mean", "per_head"},
          "eq. 4 over heads: variance of the head-mean column sums (Fig. 1) or mean of per-head variances"),
      ParamSpec::integer("min_layer_tokens", 12, 1, 1 << 20,
                         "floor on S_l (alpha_min * n >= T + 8, spec A6-2); excess is water-filled to other layers"),
  };
}

AllocationSettings allocation_settings(const PolicyParams& params) {
  AllocationSettings s;
  s.norm = parse_variance_norm(params.get_choice("variance_norm"));
  s.variance = parse_variance_mode(params.get_choice("variance_heads"));
  s.temperature = params.get_float("variance_temperature");
  s.min_layer_tokens = params.get_int("min_layer_tokens");
  return s;
}

observation::ObservationRequest D2OAllocation::request(int) const {
  observation::ObservationRequest r;
  r.column_sums = true;
  return r;
}

void D2OAllocation::observe(const observation::AttentionObservation& obs) {
  // Layer 0 starts a new prefill pass (a new run, or the next prefill block whose view supersedes).
  if (obs.layer == 0) reset();
  if (obs.layer != static_cast<int>(variances_.size()))
    throw Error("d2o allocation: observed layer " + std::to_string(obs.layer) + ", expected layer " +
                std::to_string(variances_.size()) + " (layers must be observed in order, once per prefill)");
  variances_.push_back(column_sum_variance(obs.column_sums, settings_.variance));
  const int group = obs.n_kv_heads > 0 ? obs.n_heads / obs.n_kv_heads : 1;
  std::vector<double> per_kv_head;
  for (int g = 0; g < obs.n_kv_heads; ++g) {
    const std::vector<std::vector<float>> heads(obs.column_sums.begin() + g * group,
                                                obs.column_sums.begin() + (g + 1) * group);
    per_kv_head.push_back(column_sum_variance(heads, settings_.variance));
  }
  head_variances_.push_back(std::move(per_kv_head));
}

std::vector<int> D2OAllocation::budgets(int n_layers, int average_budget, int seq_len) {
  if (static_cast<int>(variances_.size()) != n_layers)
    throw Error("d2o allocation: " + std::to_string(variances_.size()) + " layers observed, expected " +
                std::to_string(n_layers));
  shares_ = layer_shares(variances_, settings_.norm, settings_.temperature, seq_len);
  if (settings_.norm == AllocNorm::ExpDecay)
    return layer_budgets_from_factors(shares_, average_budget, seq_len, settings_.min_layer_tokens, reserved_);
  return layer_budgets_from_shares(shares_, average_budget, seq_len, settings_.min_layer_tokens, reserved_);
}

std::vector<std::vector<int>> D2OAllocation::head_budgets(int n_layers, int average_budget, int seq_len) {
  if (static_cast<int>(head_variances_.size()) != n_layers)
    throw Error("d2o allocation: " + std::to_string(head_variances_.size()) + " layers observed, expected " +
                std::to_string(n_layers));
  // Eq. 17 spreads S_total = rho * L * H * S over every (layer, head) at once: the same arithmetic as the
  // layer level with L * H entries in place of L.
  std::vector<double> flat;
  for (const auto& layer : head_variances_) flat.insert(flat.end(), layer.begin(), layer.end());
  shares_ = layer_shares(flat, settings_.norm, settings_.temperature, seq_len);
  const std::vector<int> budgets =
      settings_.norm == AllocNorm::ExpDecay
          ? layer_budgets_from_factors(shares_, average_budget, seq_len, settings_.min_layer_tokens, reserved_)
          : layer_budgets_from_shares(shares_, average_budget, seq_len, settings_.min_layer_tokens, reserved_);
  std::vector<std::vector<int>> out(n_layers);
  std::size_t i = 0;
  for (int l = 0; l < n_layers; ++l)
    for (std::size_t g = 0; g < head_variances_[l].size(); ++g) out[l].push_back(budgets[i++]);
  return out;
}

void D2OAllocation::publish(Diagnostics& out) const {
  const int L = static_cast<int>(variances_.size());
  out.set("layer_variance", Series{variances_, {L}, {"layer"}, "D2O eq. 4: F_v^l, variance of the prompt attention-column sums"});
  if (static_cast<int>(shares_.size()) == L)
    out.set("layer_share",
            Series{shares_, {L}, {"layer"}, "D2O eq. 5: softmax share alpha_l / (L * rho) after variance_norm"});
  else if (L > 0)
    out.set("head_share", Series{shares_,
                                 {L, static_cast<int>(shares_.size()) / L},
                                 {"layer", "kv_head"},
                                 "D2O App. A.9 eq. 17: share alpha_l^h of every (layer, KV head) after variance_norm"});
  if (settings_.norm == AllocNorm::ExpDecay)
    out.warn(
        "d2o allocation: variance_norm=exp_decay (Table 4) gives each layer b * exp(-F_v), not a share of "
        "L * b: the cache holds less than the budget (see the run's layer budgets)");
}

}  // namespace kvscope::policy::d2o

namespace kvscope::policy {

AllocationInfo d2o_allocation_info() {
  return {"d2o",
          "inverse-variance softmax over the variance of each layer's prompt attention-column sums (D2O)",
          "Wan et al., D2O (arXiv 2406.13035), Sec. 4.1, eqs. 4-5",
          d2o::allocation_params(),
          [](const PolicyParams& p) { return std::make_unique<d2o::D2OAllocation>(d2o::allocation_settings(p)); }};
}

}  // namespace kvscope::policy
