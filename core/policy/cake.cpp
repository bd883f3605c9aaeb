// CAKE (ICLR 2025): each layer's share of the cache follows its preference P_l = H_l^(1/tau1) * V_l^(1/tau2),
// the entropy and variance of its last-window attention (Eq. 4-7). During prefill the budgets are
// recomputed as each layer finishes and every layer seen so far is shrunk at once (cascading,
// Algorithm 1, Eq. 9), which keeps exactly what one eviction after the last layer would (Theorem 1).
// Tokens are ranked by Mean + gamma * Var of their window attention, pooled (Eq. 11-12); the last S_w
// tokens are always kept on top of the layer's budget. Decoding evicts one token per layer and step to
// hold each layer at its prefill budget (App. C). See docs/policies.md, "cake".
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <random>

#include "core/common/error.h"
#include "core/policy/allocation_report.h"
#include "core/policy/cake_preference.h"
#include "core/policy/catalog.h"
#include "core/policy/policy_layers.h"
#include "core/policy/selection.h"

namespace kvscope::policy {

namespace {

struct CakeConfig {
  int window = 32;  // S_w
  double gamma = 200.0;
  double tau1 = 1.0, tau2 = 1.0;
  int kernel = 5;
  Pooling pooling = Pooling::Avg;
  bool cascade = true;
  bool decode_window = false;  // decode indicator over the last S_w rows (Eq. 11) instead of the last row
  cake::PreferenceTerms terms = cake::PreferenceTerms::Both;  // App. I ablation
  bool random_preference = false;                             // Table 2's random allocation
  unsigned preference_seed = 0;
  cake::IndicatorForm indicator = cake::IndicatorForm::MeanPlusVariance;  // Table 3 ablation
};

// Ω of Eq. 11: the window's entries outrank every indicator value.
constexpr float kOmega = std::numeric_limits<float>::infinity();

class CakePolicy final : public Policy {
 public:
  explicit CakePolicy(const CakeConfig& config) : config_(config) {}

  std::string name() const override { return "cake"; }

  ObservationRequest request(int, Phase phase) const override {
    ObservationRequest r;
    if (phase == Phase::Prefill || config_.decode_window) {
      r.window = window_;
      r.window_rows = true;
    } else {
      r.last_row = true;
    }
    return r;
  }

  void begin(const RunInfo& info) override {
    // Slots, not model layers: under swa=skip|window the cascade shares the pool among the global layers alone.
    decided_ = PolicyLayers(info.config, swa_mode());
    layers_ = decided_.size();
    kv_heads_ = info.config.n_kv_heads;
    group_ = info.config.group_size();
    budget_ = info.budget;
    prompt_ = info.prompt_length;
    if (budget_ < 1) throw UsageError("cake needs a budget of at least 1 token per layer and KV head");
    // The window is kept on top of each layer's share, so the total pool is (b - S_w) * L and each layer
    // averages b entries (reference code: B_total = (cache_size - S_w) * L).
    window_ = std::min(config_.window, budget_);
    total_ = static_cast<long>(budget_ - window_) * layers_;
    cap_ = std::max(0, prompt_ - window_);
    // A prompt the average budget already holds is not compressed; decoding then holds each layer at b.
    compress_ = prompt_ > budget_;
    budgets_.assign(layers_, compress_ ? -1 : budget_ - window_);
    log_pref_.assign(layers_, 0.0);
    stats_.assign(layers_, {});
    indicators_.assign(static_cast<std::size_t>(layers_) * kv_heads_, {});
    rows_.assign(static_cast<std::size_t>(layers_) * info.config.n_heads, {});
    seq_len_ = 0;
    diagnostics_ = Diagnostics();
  }

  cache::CacheEdit after_layer(const AttentionObservation& obs, cache::KVCache& cache) override {
    if (config_.decode_window) remember_rows(obs);
    if (obs.phase == Phase::Prefill) return prefill_stage(obs, cache);
    return decode_step(obs);
  }

  cache::CacheEdit after_step(const StepInfo& step, cache::KVCache&) override {
    seq_len_ = step.seq_len;
    return {};
  }

  int expected_length(int model_layer, int, const StepInfo& step) const override {
    const int layer = decided_.slot(model_layer);
    if (layer < 0 || budgets_[layer] < 0) return -1;
    return std::min(step.seq_len, budgets_[layer] + window_);
  }

  std::vector<int> layer_budgets() const override {
    std::vector<int> out(layers_, 0);
    for (int l = 0; l < layers_; ++l) out[l] = budgets_[l] < 0 ? 0 : budgets_[l] + window_;
    return decided_.to_model_layers(out, prompt_);
  }

 private:
  // Stage m = obs.layer of Algorithm 1: layer m's preference and indicator (lines 4-7), the budgets of
  // layers 0..m (line 8, Eq. 9) and the eviction of every layer that now holds more (lines 10-14).
  cache::CacheEdit prefill_stage(const AttentionObservation& obs, cache::KVCache& cache) {
    const int m = decided_.slot(obs.layer);
    const int s = obs.n_keys[0];
    const int prefix = s - window_;
    stats_[m] = cake::window_stats(obs, std::max(0, prefix), window_);
    log_pref_[m] = config_.random_preference
                       ? random_log_preference(decided_.layer(m))
                       : cake::log_preference(stats_[m], config_.tau1, config_.tau2, config_.terms);
    if (!compress_ || prefix <= 0 || obs.window < window_) {
      record_stage(m);
      return {};
    }
    for (int g = 0; g < kv_heads_; ++g)
      indicators_[slot(m, g)] = cake::eviction_indicator(obs, g, prefix, window_, config_.gamma, config_.kernel,
                                                         config_.pooling, config_.indicator);

    const bool last = m == layers_ - 1;
    if (!config_.cascade && !last) {
      record_stage(m);
      return {};
    }
    const int stage_layers = config_.cascade ? m + 1 : layers_;
    std::vector<double> prefs(log_pref_.begin(), log_pref_.begin() + stage_layers);
    std::vector<int> budgets = cake::stage_budgets(prefs, total_, cap_, last);
    // Proposition 1 holds for real budgets; the clamp guards rounding so a layer never needs back an
    // entry it already evicted. Whatever it takes goes to the newest layer, which has evicted nothing.
    long slack = 0;
    for (int l = 0; l < stage_layers; ++l)
      if (budgets_[l] >= 0 && budgets[l] > budgets_[l]) {
        slack += budgets[l] - budgets_[l];
        budgets[l] = budgets_[l];
      }
    if (slack > 0) budgets[m] = std::min<long>(cap_, budgets[m] + slack);

    cache::CacheEdit edit;
    for (int l = 0; l < stage_layers; ++l) {
      budgets_[l] = budgets[l];
      for (int g = 0; g < kv_heads_; ++g) evict_prefix(l, g, budgets[l], cache, edit);
    }
    record_stage(m);
    if (last) {
      std::vector<int> held(layers_);
      for (int l = 0; l < layers_; ++l) held[l] = budgets_[l] + window_;
      report_layer_budgets(decided_.to_model_layers(held, s), s, budget_, window_, "policy 'cake'", diagnostics_,
                           &decided_);
    }
    return edit;
  }

  // EVICT of Eq. 12: the top-B entries of the current prefix by the stored indicator, plus the window;
  // the indicator shrinks with the cache so later stages rank the survivors by the same values.
  void evict_prefix(int l, int g, int budget, const cache::KVCache& cache, cache::CacheEdit& edit) {
    std::vector<float>& indicator = indicators_[slot(l, g)];
    const int prefix = static_cast<int>(indicator.size());
    if (prefix <= budget) return;
    const int n = cache.size(decided_.layer(l), g);
    std::vector<float> scores(n, kOmega);
    std::copy(indicator.begin(), indicator.end(), scores.begin());
    std::vector<int32_t> keep = keep_top_scores(scores, budget + (n - prefix), 0, n - prefix);
    std::vector<float> kept;
    for (int32_t i : keep)
      if (i < prefix) kept.push_back(indicator[i]);
    indicator.swap(kept);
    compact_rows(l, g, keep);
    edit.heads.push_back(keep_edit(decided_.layer(l), g, std::move(keep), std::move(scores)));
  }

  // Decoding (App. C and the reference code's layer-wise decoding cache): the budget stays fixed and the
  // prefix entry with the lowest pooled score of the current query leaves as each new token arrives.
  cache::CacheEdit decode_step(const AttentionObservation& obs) {
    cache::CacheEdit edit;
    const int l = decided_.slot(obs.layer);
    if (budgets_[l] < 0) return edit;
    const int limit = budgets_[l] + window_;
    for (int g = 0; g < kv_heads_; ++g) {
      const int n = obs.n_keys[g];
      if (n <= limit) continue;
      const int prefix = n - window_;
      std::vector<float> prefix_scores(prefix, 0.0f);
      if (config_.decode_window) {
        prefix_scores = window_indicator(l, g, prefix);
      } else {
        for (int k = 0; k < group_; ++k) {
          const std::vector<float> pooled = pool1d(std::span<const float>(obs.last_row[g * group_ + k].data(), prefix),
                                                   config_.kernel, config_.pooling);
          for (int j = 0; j < prefix; ++j) prefix_scores[j] += pooled[j] / group_;
        }
      }
      std::vector<float> scores(n, kOmega);
      std::copy(prefix_scores.begin(), prefix_scores.end(), scores.begin());
      std::vector<int32_t> keep = keep_top_scores(scores, limit, 0, window_);
      compact_rows(l, g, keep);
      edit.heads.push_back(keep_edit(obs.layer, g, std::move(keep), std::move(scores)));
    }
    return edit;
  }

  // Table 2's random allocation: P_l uniform in (0, 1], drawn per layer from the seed.
  double random_log_preference(int layer) const {
    std::seed_seq seed{config_.preference_seed, static_cast<unsigned>(layer)};
    std::mt19937 rng(seed);
    return std::log(1.0 - std::uniform_real_distribution<double>(0.0, 1.0)(rng));
  }

  // decode=window: Eq. 11 recomputed each step over the stored rows of the last S_w queries.
  std::vector<float> window_indicator(int l, int g, int prefix) const {
    std::vector<float> out(prefix, 0.0f);
    for (int k = 0; k < group_; ++k) {
      const auto& rows = rows_[static_cast<std::size_t>(l) * kv_heads_ * group_ + g * group_ + k];
      const double w = static_cast<double>(rows.size());
      if (rows.empty()) continue;
      std::vector<float> indicator(prefix);
      for (int j = 0; j < prefix; ++j) {
        double sum = 0.0;
        for (const auto& row : rows) sum += j < static_cast<int>(row.size()) ? row[j] : 0.0f;
        const double mean = sum / w;
        double ss = 0.0;
        for (const auto& row : rows) {
          const double diff = (j < static_cast<int>(row.size()) ? row[j] : 0.0f) - mean;
          ss += diff * diff;
        }
        indicator[j] = static_cast<float>(
            cake::indicator_value(mean, ss / std::max(1.0, w - 1.0), config_.gamma, config_.indicator));
      }
      const std::vector<float> pooled = pool1d(indicator, config_.kernel, config_.pooling);
      for (int j = 0; j < prefix; ++j) out[j] += pooled[j] / group_;
    }
    return out;
  }

  void remember_rows(const AttentionObservation& obs) {
    for (int h = 0; h < obs.n_heads; ++h) {
      const int n = obs.keys_of(h);
      auto& rows = rows_[static_cast<std::size_t>(decided_.slot(obs.layer)) * obs.n_heads + h];
      for (int r = 0; r < obs.window; ++r) {
        const float* row = obs.window_rows[h].data() + static_cast<std::size_t>(r) * n;
        rows.emplace_back(row, row + n);
        if (static_cast<int>(rows.size()) > window_) rows.pop_front();
      }
    }
  }

  void compact_rows(int l, int g, const std::vector<int32_t>& keep) {
    if (!config_.decode_window) return;
    for (int k = 0; k < group_; ++k)
      for (auto& row : rows_[static_cast<std::size_t>(l) * kv_heads_ * group_ + g * group_ + k]) {
        std::vector<float> kept;
        for (int32_t i : keep)
          if (static_cast<std::size_t>(i) < row.size()) kept.push_back(row[i]);
        row.swap(kept);
      }
  }

  // One row per stage: what is known after layer m (layers not reached yet read -1).
  void record_stage(int m) {
    std::vector<double> h(layers_, -1.0), v(layers_, -1.0), p(layers_, -1.0), b(layers_, -1.0);
    for (int l = 0; l <= m; ++l) {
      h[l] = stats_[l].entropy;
      v[l] = stats_[l].variance;
      p[l] = std::isfinite(log_pref_[l]) ? std::exp(log_pref_[l]) : 0.0;
      if (budgets_[l] >= 0) b[l] = budgets_[l] + window_;
    }
    // Rows span the model's layers; NaN marks a sliding-window layer the cascade leaves to its window.
    const double local = std::numeric_limits<double>::quiet_NaN();
    h = decided_.to_model_layers(h, local);
    v = decided_.to_model_layers(v, local);
    p = decided_.to_model_layers(p, local);
    b = decided_.to_model_layers(b, local);
    diagnostics_.append_row("cake_entropy", h, "stage", "layer",
                            "H_l (Eq. 4 on A[-S_w:, :-S_w], summed over query heads) known at each cascade stage; -1: "
                            "layer not reached");
    diagnostics_.append_row("cake_variance", v, "stage", "layer",
                            "V_l (Eq. 5, unbiased variance over the window rows, summed over keys and heads) known at "
                            "each stage; -1: layer not reached");
    diagnostics_.append_row("cake_preference", p, "stage", "layer",
                            "P_l = H_l^(1/tau1) * V_l^(1/tau2) (Eq. 6) known at each stage; -1: layer not reached");
    diagnostics_.append_row("cake_budgets", b, "stage", "layer",
                            "entries per KV head after each stage: B_l^(m) (Eq. 9) plus the S_w window; -1: not "
                            "allocated yet");
  }

  std::size_t slot(int layer, int kv_head) const { return static_cast<std::size_t>(layer) * kv_heads_ + kv_head; }

  CakeConfig config_;
  PolicyLayers decided_;  // the layers of the cascade; everything below is indexed by their slot
  int layers_ = 0, kv_heads_ = 0, group_ = 1, budget_ = 0, prompt_ = 0, seq_len_ = 0;
  int window_ = 0, cap_ = 0;
  long total_ = 0;
  bool compress_ = false;
  std::vector<int> budgets_;  // B_l without the window; -1 before allocation
  std::vector<double> log_pref_;
  std::vector<cake::LayerStats> stats_;
  std::vector<std::vector<float>> indicators_;        // [layer * kv_heads + g][current prefix entries]
  std::vector<std::deque<std::vector<float>>> rows_;  // decode=window: last S_w rows per query head
};

}  // namespace

PolicyInfo cake_policy_info() {
  std::vector<ParamSpec> params = {
      ParamSpec::integer("window", 32, 1, 4096, "S_w: observation window and always-kept recent tokens (App. C: 32)"),
      ParamSpec::real("gamma", 200.0, 0.0, 1e6, "weight of the variance in the indicator, Eq. 11 (App. C: 200)"),
      ParamSpec::real("tau1", 1.0, 0.05, 20.0, "entropy temperature of Eq. 6 (grid 0.2-2; code default 1)"),
      ParamSpec::real("tau2", 1.0, 0.05, 20.0, "variance temperature of Eq. 6 (grid 0.4-3; code default 1)"),
      ParamSpec::integer("kernel", 5, 1, 63, "pooling kernel of the indicator (§4.3; code: 5)"),
      ParamSpec::choice("pooling", "avg", {"none", "avg", "max"}, "pooling of the indicator (code: avg)"),
      ParamSpec::choice(
          "mode", "cascade", {"cascade", "oneshot"},
          "evict every layer seen so far after each layer (Algorithm 1) or all once after the last (Eq. 7)"),
      ParamSpec::choice("decode", "last", {"last", "window"},
                        "decode indicator: pooled last-query attention (code) or Eq. 11 over the last S_w queries"),
      ParamSpec::choice("preference", "entropy_variance", {"entropy_variance", "entropy", "variance", "random"},
                        "layer preference: H^(1/tau1) V^(1/tau2) (Eq. 6), one term alone (App. I ablation), or "
                        "random per layer (Table 2)"),
      ParamSpec::integer("preference_seed", 0, 0, 1 << 30, "preference=random: seed of the draws"),
      ParamSpec::choice("indicator", "mean_plus_var", {"mean_plus_var", "mean", "var", "mean_times_var"},
                        "eviction indicator: Mean + gamma Var (Eq. 11), or Table 3's Mean, Var, Mean x Var"),
  };
  return {"cake",
          "layer budgets from attention entropy and variance, cascaded through prefill; mean + gamma*variance eviction",
          "Qin et al., CAKE: Cascading and Adaptive KV cache Eviction with layer preferences (ICLR 2025)", params,
          [](const PolicyParams& p) {
            CakeConfig c;
            c.window = p.get_int("window");
            c.gamma = p.get_float("gamma");
            c.tau1 = p.get_float("tau1");
            c.tau2 = p.get_float("tau2");
            c.kernel = p.get_int("kernel");
            if (c.kernel % 2 == 0)
              throw UsageError("policy 'cake' parameter 'kernel' = " + std::to_string(c.kernel) + " must be odd");
            c.pooling = parse_pooling(p.get_choice("pooling"));
            c.cascade = p.get_choice("mode") == "cascade";
            c.decode_window = p.get_choice("decode") == "window";
            const std::string& preference = p.get_choice("preference");
            c.terms = preference == "entropy"    ? cake::PreferenceTerms::EntropyOnly
                      : preference == "variance" ? cake::PreferenceTerms::VarianceOnly
                                                 : cake::PreferenceTerms::Both;
            c.random_preference = preference == "random";
            c.preference_seed = static_cast<unsigned>(p.get_int("preference_seed"));
            const std::string& indicator = p.get_choice("indicator");
            c.indicator = indicator == "mean"             ? cake::IndicatorForm::Mean
                          : indicator == "var"            ? cake::IndicatorForm::Variance
                          : indicator == "mean_times_var" ? cake::IndicatorForm::Product
                                                          : cake::IndicatorForm::MeanPlusVariance;
            return std::make_unique<CakePolicy>(c);
          }};
}

}  // namespace kvscope::policy
