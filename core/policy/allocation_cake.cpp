// CAKE's preference-prioritised allocation (Qin et al., ICLR 2025, §4.1, Eq. 6-7) for any scorer
// (`snapkv:allocation=cake`), as the paper itself pairs it with H2O and SnapKV (Fig. 8). Each layer's
// budget above the scorer's reserved tokens is proportional to P_l = H_l^(1/tau1) * V_l^(1/tau2), the
// entropy and variance of its last-window prefill attention. One shot after prefill: the cascade that
// keeps peak memory down is the `cake` policy's (it needs the policy's own eviction order).
// See docs/policies.md, "Allocation: cake".
#include <algorithm>
#include <cmath>

#include "core/policy/allocation_catalog.h"
#include "core/policy/cake_preference.h"

namespace kvscope::policy {

namespace {

class CakeAllocation final : public LayerAllocation {
 public:
  CakeAllocation(int window, double tau1, double tau2) : window_(window), tau1_(tau1), tau2_(tau2) {}
  std::string name() const override { return "cake"; }

  observation::ObservationRequest request(int) const override {
    observation::ObservationRequest r;
    r.window = window_;
    r.window_rows = true;
    return r;
  }

  void observe(const observation::AttentionObservation& obs) override {
    if (obs.layer >= static_cast<int>(stats_.size())) stats_.resize(obs.layer + 1);
    // Obs = A[-S_w:, :-S_w] (Eq. 6): the window's rows over the keys before the window.
    const int rows = std::min(window_, obs.window);
    const int prefix = obs.n_keys.empty() ? 0 : std::max(0, obs.n_keys[0] - rows);
    stats_[obs.layer] = cake::window_stats(obs, prefix, rows);
  }

  std::vector<int> budgets(int n_layers, int average_budget, int seq_len) override {
    const int reserved = std::max(reserved_, 0);
    stats_.resize(n_layers);
    log_pref_.assign(n_layers, 0.0);
    for (int l = 0; l < n_layers; ++l) log_pref_[l] = cake::log_preference(stats_[l], tau1_, tau2_);
    if (average_budget >= seq_len || average_budget <= reserved)
      return std::vector<int>(n_layers, std::clamp(average_budget, 1, std::max(seq_len, 1)));
    // Eq. 7 over the budget above the reserved tokens, each layer capped at the prompt; the same
    // rounding as the cake policy's last cascade stage.
    std::vector<int> out = cake::stage_budgets(log_pref_, static_cast<long>(n_layers) * (average_budget - reserved),
                                               seq_len - reserved, true);
    for (int& b : out) b = std::max(1, b + reserved);
    return out;
  }

  void publish(Diagnostics& out) const override {
    const int n = static_cast<int>(stats_.size());
    std::vector<double> h(n), v(n), p(n);
    for (int l = 0; l < n; ++l) {
      h[l] = stats_[l].entropy;
      v[l] = stats_[l].variance;
      p[l] = l < static_cast<int>(log_pref_.size()) && std::isfinite(log_pref_[l]) ? std::exp(log_pref_[l]) : 0.0;
    }
    out.set("cake_entropy", {h, {n}, {"layer"}, "H_l, Eq. 4 on A[-S_w:, :-S_w], summed over query heads"});
    out.set("cake_variance",
            {v, {n}, {"layer"}, "V_l, Eq. 5 (unbiased variance over the window rows), summed over keys and heads"});
    out.set("cake_preference", {p, {n}, {"layer"}, "P_l = H_l^(1/tau1) * V_l^(1/tau2), Eq. 6"});
  }

 private:
  int window_;
  double tau1_, tau2_;
  std::vector<cake::LayerStats> stats_;
  std::vector<double> log_pref_;
};

}  // namespace

AllocationInfo cake_allocation_info() {
  return {
      "cake",
      "budgets in proportion to each layer's attention entropy and variance over the last window (CAKE)",
      "Qin et al. 2025, CAKE, §4.1, Eq. 6-7",
      {ParamSpec::integer("cake_window", 32, 1, 4096,
                          "CAKE App. C: S_w, the last prompt queries whose attention gives H_l and V_l (32)"),
       ParamSpec::real("cake_tau1", 1.0, 0.05, 20.0, "CAKE Eq. 6: entropy temperature (grid 0.2-2; code default 1)"),
       ParamSpec::real("cake_tau2", 1.0, 0.05, 20.0, "CAKE Eq. 6: variance temperature (grid 0.4-3; code default 1)")},
      [](const PolicyParams& p) {
        return std::make_unique<CakeAllocation>(p.get_int("cake_window"), p.get_float("cake_tau1"),
                                                p.get_float("cake_tau2"));
      }};
}

}  // namespace kvscope::policy
