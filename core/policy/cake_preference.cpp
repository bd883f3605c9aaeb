#include "core/policy/cake_preference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kvscope::policy::cake {

namespace {
// The reference code adds 1e-10 inside the logarithm so zero probabilities contribute nothing.
constexpr double kLogEpsilon = 1e-10;
}  // namespace

LayerStats window_stats(const observation::AttentionObservation& obs, int prefix, int rows) {
  LayerStats stats;
  const int w = std::min(rows, obs.window);
  if (w <= 0 || prefix <= 0) return stats;
  // A single row has no spread; the unbiased divisor would be 0.
  const double divisor = w > 1 ? w - 1 : 1;
  for (int h = 0; h < obs.n_heads; ++h) {
    const int n = obs.keys_of(h);
    const float* last = obs.window_rows[h].data() + static_cast<std::size_t>(obs.window - w) * n;
    for (int j = 0; j < prefix; ++j) {
      double sum = 0.0;
      for (int r = 0; r < w; ++r) {
        const double p = last[static_cast<std::size_t>(r) * n + j];
        stats.entropy -= p * std::log(p + kLogEpsilon);
        sum += p;
      }
      const double mean = sum / w;
      double ss = 0.0;
      for (int r = 0; r < w; ++r) {
        const double diff = last[static_cast<std::size_t>(r) * n + j] - mean;
        ss += diff * diff;
      }
      stats.variance += ss / divisor;
    }
  }
  return stats;
}

double log_preference(const LayerStats& stats, double tau1, double tau2, PreferenceTerms terms) {
  const bool entropy = terms != PreferenceTerms::VarianceOnly, variance = terms != PreferenceTerms::EntropyOnly;
  if ((entropy && stats.entropy <= 0.0) || (variance && stats.variance <= 0.0))
    return -std::numeric_limits<double>::infinity();
  // In logs: V_l is often ~1e-3 and 1/tau up to 5, which a float power would flush towards 0.
  return (entropy ? std::log(stats.entropy) / tau1 : 0.0) + (variance ? std::log(stats.variance) / tau2 : 0.0);
}

double indicator_value(double mean, double variance, double gamma, IndicatorForm form) {
  switch (form) {
    case IndicatorForm::Mean:
      return mean;
    case IndicatorForm::Variance:
      return variance;
    case IndicatorForm::Product:
      return mean * variance;
    case IndicatorForm::MeanPlusVariance:
      break;
  }
  return mean + gamma * variance;  // Eq. 11
}

std::vector<float> eviction_indicator(const observation::AttentionObservation& obs, int kv_head, int prefix, int rows,
                                      double gamma, int kernel, Pooling pooling, IndicatorForm form) {
  const int group = obs.n_heads / obs.n_kv_heads;
  const int w = std::min(rows, obs.window);
  const int n = obs.n_keys[kv_head];
  const double divisor = w > 1 ? w - 1 : 1;
  std::vector<float> out(prefix, 0.0f);
  if (prefix <= 0 || w <= 0) return out;
  for (int k = 0; k < group; ++k) {
    const int h = kv_head * group + k;
    const float* last = obs.window_rows[h].data() + static_cast<std::size_t>(obs.window - w) * n;
    std::vector<float> indicator(prefix);
    for (int j = 0; j < prefix; ++j) {
      double sum = 0.0;
      for (int r = 0; r < w; ++r) sum += last[static_cast<std::size_t>(r) * n + j];
      const double mean = sum / w;
      double ss = 0.0;
      for (int r = 0; r < w; ++r) {
        const double diff = last[static_cast<std::size_t>(r) * n + j] - mean;
        ss += diff * diff;
      }
      indicator[j] = static_cast<float>(indicator_value(mean, ss / divisor, gamma, form));
    }
    // §4.3: "a pooling layer clusters I_l[:S-S_w]" (per head, before the group mean, as the code does).
    const std::vector<float> pooled = pool1d(indicator, kernel, pooling);
    for (int j = 0; j < prefix; ++j) out[j] += pooled[j] / group;
  }
  return out;
}

std::vector<double> budget_shares(const std::vector<double>& log_pref, double total, double cap) {
  const std::size_t n = log_pref.size();
  std::vector<double> pref(n, 1.0);
  bool any = false;
  for (double lp : log_pref) any = any || std::isfinite(lp);
  // exp(ln P) without a max shift: the same P_l then enters every stage bit for bit, so the sums only
  // grow and the budgets only shrink (Eq. 8) in floating point too.
  if (any)
    for (std::size_t l = 0; l < n; ++l) pref[l] = std::isfinite(log_pref[l]) ? std::exp(log_pref[l]) : 0.0;
  std::vector<char> capped(n, 0);
  std::vector<double> out(n, cap);
  for (;;) {
    double remaining = total, denom = 0.0;
    for (std::size_t l = 0; l < n; ++l) {
      if (capped[l])
        remaining -= cap;
      else
        denom += pref[l];
    }
    if (denom <= 0.0) {
      // Every uncapped layer prefers nothing: they share what is left equally.
      std::size_t free = 0;
      for (std::size_t l = 0; l < n; ++l) free += !capped[l];
      for (std::size_t l = 0; l < n; ++l)
        if (!capped[l]) out[l] = std::min(cap, std::max(0.0, remaining) / static_cast<double>(free));
      return out;
    }
    bool changed = false;
    for (std::size_t l = 0; l < n; ++l) {
      if (capped[l]) continue;
      out[l] = remaining * (pref[l] / denom);  // Eq. 9
      if (out[l] >= cap) {
        capped[l] = 1;
        out[l] = cap;
        changed = true;
      }
    }
    if (!changed) return out;
  }
}

std::vector<int> stage_budgets(const std::vector<double>& log_pref, long total, int cap, bool last_stage) {
  const std::vector<double> shares = budget_shares(log_pref, static_cast<double>(total), cap);
  const std::size_t n = shares.size();
  std::vector<int> out(n);
  if (!last_stage) {
    for (std::size_t l = 0; l < n; ++l) out[l] = std::min(cap, static_cast<int>(std::ceil(shares[l])));
    return out;
  }
  long assigned = 0;
  for (std::size_t l = 0; l < n; ++l) {
    out[l] = std::min(cap, static_cast<int>(std::floor(shares[l])));
    assigned += out[l];
  }
  const long target = std::min<long>(total, static_cast<long>(cap) * static_cast<long>(n));
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return shares[a] - std::floor(shares[a]) > shares[b] - std::floor(shares[b]);
  });
  for (std::size_t i = 0; assigned < target && i < n; ++i) {
    const std::size_t l = order[i];
    if (out[l] < cap) {
      ++out[l];
      ++assigned;
    }
  }
  return out;
}

}  // namespace kvscope::policy::cake
