#pragma once
// How sure a mean over samples is: seeded percentile-bootstrap confidence intervals of a mean, and of the
// mean paired difference between two policies scored on the same samples.
//
// Method (Efron & Tibshirani, "An Introduction to the Bootstrap", ch. 13, the percentile interval): draw
// `resamples` samples of n values with replacement (a seeded 64-bit Mersenne Twister, so the same inputs and
// seed give the same interval on every machine), take each resample's mean, and report the (1-level)/2 and
// (1+level)/2 quantiles of those means (type-7 linear interpolation, numpy's default). Paired differences
// resample the pairs, keeping each sample's two scores together.
#include <cstdint>
#include <vector>

namespace kvscope::eval {

struct BootstrapSettings {
  int resamples = 2000;
  double level = 0.95;
  uint64_t seed = 20261125;
};

struct Interval {
  double mean = 0.0;  // of the values themselves
  double low = 0.0, high = 0.0;
  int n = 0;
  bool excludes_zero() const { return n > 0 && (low > 0.0 || high < 0.0); }
};

// Throws Error for no values, a level outside (0, 1) or fewer than 1 resample. One value gives a zero-width
// interval at it.
Interval bootstrap_mean(const std::vector<double>& values, const BootstrapSettings& settings = {});
// The mean of a[i] - b[i] with its interval; throws Error when the lists differ in length.
Interval bootstrap_paired_difference(const std::vector<double>& a, const std::vector<double>& b,
                                     const BootstrapSettings& settings = {});
// The q-quantile (0 <= q <= 1) of sorted values by linear interpolation between closest ranks (type 7).
double quantile_sorted(const std::vector<double>& sorted, double q);

}  // namespace kvscope::eval
