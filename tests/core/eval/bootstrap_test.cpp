// Bootstrap intervals against cases with a closed form, and their coverage on simulated data.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "core/eval/bootstrap.h"

using namespace kvscope::eval;

namespace {

// P(X <= k) for X ~ Binomial(n, p), summed directly.
double binomial_cdf(int k, int n, double p) {
  double total = 0.0;
  for (int i = 0; i <= k; ++i)
    total += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) + i * std::log(p) +
                      (n - i) * std::log1p(-p));
  return total;
}

// The smallest k with P(X <= k) >= q.
int binomial_quantile(double q, int n, double p) {
  for (int k = 0; k <= n; ++k)
    if (binomial_cdf(k, n, p) >= q) return k;
  return n;
}

}  // namespace

TEST_CASE("the bootstrap of a mean of Bernoulli outcomes follows the binomial distribution", "[bootstrap]") {
  // Resampling n outcomes with k successes gives means distributed exactly as Binomial(n, k/n) / n, so the
  // percentile interval's ends are that distribution's quantiles (to one step of 1/n, and sampling noise).
  for (const auto& [n, k] : std::vector<std::pair<int, int>>{{50, 10}, {80, 60}, {200, 100}}) {
    INFO("n " << n << " successes " << k);
    std::vector<double> outcomes(n, 0.0);
    for (int i = 0; i < k; ++i) outcomes[i] = 1.0;
    BootstrapSettings settings;
    settings.resamples = 20000;
    const Interval ci = bootstrap_mean(outcomes, settings);
    const double p = static_cast<double>(k) / n;
    CHECK(ci.mean == Approx(p));
    CHECK(ci.n == n);
    const double low = binomial_quantile(0.025, n, p) / static_cast<double>(n);
    const double high = binomial_quantile(0.975, n, p) / static_cast<double>(n);
    CHECK(std::abs(ci.low - low) <= 1.0 / n + 1e-12);
    CHECK(std::abs(ci.high - high) <= 1.0 / n + 1e-12);
  }
}

TEST_CASE("bootstrap intervals cover the true mean about as often as they claim", "[bootstrap]") {
  std::mt19937_64 rng(7);
  std::bernoulli_distribution bernoulli(0.3);
  std::normal_distribution<double> normal(0.2, 1.0);
  int covered_bernoulli = 0, covered_normal = 0;
  const int trials = 400, n = 100;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> a(n), b(n);
    for (int i = 0; i < n; ++i) a[i] = bernoulli(rng) ? 1.0 : 0.0, b[i] = normal(rng);
    BootstrapSettings settings;
    settings.resamples = 1000;
    settings.seed = 1000 + t;
    const Interval ca = bootstrap_mean(a, settings), cb = bootstrap_mean(b, settings);
    covered_bernoulli += ca.low <= 0.3 && 0.3 <= ca.high;
    covered_normal += cb.low <= 0.2 && 0.2 <= cb.high;
  }
  // 95 % nominal; the percentile interval runs slightly short at n = 100. Binomial sampling sd over 400 trials
  // is about 1.1 %, so these bounds fail only for a real error.
  CHECK(covered_bernoulli >= 0.91 * trials);
  CHECK(covered_bernoulli <= 0.985 * trials);
  CHECK(covered_normal >= 0.91 * trials);
  CHECK(covered_normal <= 0.985 * trials);
}

TEST_CASE("paired differences keep each sample's scores together", "[bootstrap]") {
  // b = a - 0.1 exactly: every resample's mean difference is 0.1, so the interval has zero width, while the
  // unpaired spread of a is wide.
  std::vector<double> a, b;
  for (int i = 0; i < 40; ++i) a.push_back(i % 2), b.push_back((i % 2) - 0.1);
  const Interval d = bootstrap_paired_difference(a, b);
  CHECK(d.mean == Approx(0.1));
  CHECK(d.low == Approx(0.1));
  CHECK(d.high == Approx(0.1));
  CHECK(d.excludes_zero());
  const Interval same = bootstrap_paired_difference(a, a);
  CHECK_FALSE(same.excludes_zero());
}

TEST_CASE("bootstrap inputs are checked and results are seeded", "[bootstrap]") {
  CHECK_THROWS(bootstrap_mean({}));
  CHECK_THROWS(bootstrap_paired_difference({1.0}, {1.0, 2.0}));
  BootstrapSettings bad;
  bad.level = 1.0;
  CHECK_THROWS(bootstrap_mean({1.0, 2.0}, bad));
  std::vector<double> xs;
  for (int i = 0; i < 30; ++i) xs.push_back(std::sin(i * 1.7));  // many distinct resample means
  CHECK(bootstrap_mean(xs).low == bootstrap_mean(xs).low);
  BootstrapSettings other;
  other.seed = 99;
  CHECK(bootstrap_mean(xs, other).low != bootstrap_mean(xs).low);
  const Interval one = bootstrap_mean({0.4});
  CHECK(one.low == 0.4);
  CHECK(one.high == 0.4);
  CHECK(quantile_sorted({1.0, 2.0, 3.0, 4.0}, 0.5) == Approx(2.5));  // numpy.quantile's default
}
