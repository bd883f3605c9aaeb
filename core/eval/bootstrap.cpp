#include "core/eval/bootstrap.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "core/common/error.h"

namespace kvscope::eval {

double quantile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) throw Error("quantile of no values");
  const double h = (static_cast<double>(sorted.size()) - 1.0) * q;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

Interval bootstrap_mean(const std::vector<double>& values, const BootstrapSettings& settings) {
  if (values.empty()) throw Error("a confidence interval needs at least one value");
  if (!(settings.level > 0.0 && settings.level < 1.0))
    throw Error("confidence level " + std::to_string(settings.level) + " is outside (0, 1)");
  if (settings.resamples < 1) throw Error("the bootstrap needs at least one resample");
  const std::size_t n = values.size();
  Interval out;
  out.n = static_cast<int>(n);
  double sum = 0.0;
  for (double v : values) sum += v;
  out.mean = sum / static_cast<double>(n);
  std::mt19937_64 rng(settings.seed);
  std::uniform_int_distribution<std::size_t> pick(0, n - 1);
  std::vector<double> means(static_cast<std::size_t>(settings.resamples));
  for (double& m : means) {
    double s = 0.0;
    for (std::size_t i = 0; i < n; ++i) s += values[pick(rng)];
    m = s / static_cast<double>(n);
  }
  std::sort(means.begin(), means.end());
  out.low = quantile_sorted(means, (1.0 - settings.level) / 2.0);
  out.high = quantile_sorted(means, (1.0 + settings.level) / 2.0);
  return out;
}

Interval bootstrap_paired_difference(const std::vector<double>& a, const std::vector<double>& b,
                                     const BootstrapSettings& settings) {
  if (a.size() != b.size())
    throw Error("paired differences need the same samples: " + std::to_string(a.size()) + " scores against " +
                std::to_string(b.size()));
  std::vector<double> differences(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) differences[i] = a[i] - b[i];
  return bootstrap_mean(differences, settings);
}

}  // namespace kvscope::eval
