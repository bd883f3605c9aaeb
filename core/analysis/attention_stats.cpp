#include "core/analysis/attention_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvscope::analysis {

namespace {

// The window can never exceed the rows there are; with S <= S_w no key lies before the window.
int clamp_window(int s, int window) { return std::clamp(window, 0, s); }

double plogp(double p) { return p > 0.0 ? p * std::log(p) : 0.0; }

// p ln p for the streamed rows, where std::log is the recorder's hot spot (S^2/2 calls per head and
// layer). ln x = e ln 2 + ln m with m in [sqrt(1/2), sqrt(2)) and ln m = 2 atanh(t), t = (m-1)/(m+1),
// summed to t^9: absolute error below 1e-9, and branch-free so `omp simd` vectorises it. Values below
// 1e-30 (and subnormals) contribute p ln p < 1e-28, i.e. 0.
inline float fast_plogp(float p) {
  uint32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  int32_t e = static_cast<int32_t>(bits >> 23) - 127;
  uint32_t mbits = (bits & 0x7fffffu) | 0x3f800000u;
  // Move m from [1, 2) to [sqrt(1/2), sqrt(2)) so |t| stays below 0.172.
  const uint32_t high = mbits > 0x3fb504f3u ? 1u : 0u;
  mbits -= high << 23;
  e += static_cast<int32_t>(high);
  float m;
  std::memcpy(&m, &mbits, sizeof m);
  const float t = (m - 1.0f) / (m + 1.0f);
  const float t2 = t * t;
  const float ln_m = 2.0f * t * (1.0f + t2 * (1.0f / 3 + t2 * (1.0f / 5 + t2 * (1.0f / 7 + t2 * (1.0f / 9)))));
  const float ln = static_cast<float>(e) * 0.69314718056f + ln_m;
  return p > 1e-30f ? p * ln : 0.0f;
}

double entropy_of(std::span<const double> p) {
  double h = 0.0;
  for (double x : p) h -= plogp(x);
  return h;
}

double unbiased_variance(double sum, double sq, int n) {
  if (n < 2) return 0.0;
  const double mean = sum / n;
  return std::max(0.0, (sq - n * mean * mean) / (n - 1));
}

}  // namespace

double cake_window_entropy(const float* a, int s, int window) {
  const int w = clamp_window(s, window);
  double h = 0.0;
  for (int i = s - w; i < s; ++i)
    for (int j = 0; j < s - w; ++j) {
      const double p = a[static_cast<std::size_t>(i) * s + j];
      h -= p * std::log(p + kCakeEntropyEps);
    }
  return h;
}

double cake_column_variance(const float* a, int s, int window) {
  const int w = clamp_window(s, window);
  double v = 0.0;
  for (int j = 0; j < s - w; ++j) {
    double sum = 0.0, sq = 0.0;
    for (int i = s - w; i < s; ++i) {
      const double p = a[static_cast<std::size_t>(i) * s + j];
      sum += p;
      sq += p * p;
    }
    v += unbiased_variance(sum, sq, w);
  }
  return v;
}

double population_variance(std::span<const double> x) {
  if (x.empty()) return 0.0;
  double mean = 0.0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  double var = 0.0;
  for (double v : x) var += (v - mean) * (v - mean);
  return var / static_cast<double>(x.size());
}

namespace {
std::vector<double> column_sums_of(const float* a, int s) {
  std::vector<double> sums(s, 0.0);
  for (int i = 0; i < s; ++i)
    for (int j = 0; j < s; ++j) sums[j] += a[static_cast<std::size_t>(i) * s + j];
  return sums;
}
}  // namespace

double d2o_colsum_variance(const float* a, int s) { return population_variance(column_sums_of(a, s)); }

double mean_row_entropy(const float* a, int s, bool normalized) {
  double total = 0.0;
  int rows = 0;
  for (int i = normalized ? 1 : 0; i < s; ++i) {
    double h = 0.0;
    for (int j = 0; j < s; ++j) h -= plogp(a[static_cast<std::size_t>(i) * s + j]);
    total += normalized ? h / std::log(i + 1.0) : h;
    ++rows;
  }
  return rows > 0 ? total / rows : 0.0;
}

double colsum_entropy(const float* a, int s) {
  std::vector<double> p = column_sums_of(a, s);
  for (double& x : p) x /= s;
  return entropy_of(p);
}

AttentionStats attention_stats(const float* a, int s, int window) {
  AttentionStats r;
  r.cake_window_entropy = cake_window_entropy(a, s, window);
  r.cake_column_variance = cake_column_variance(a, s, window);
  r.d2o_colsum_variance = d2o_colsum_variance(a, s);
  r.mean_row_entropy = mean_row_entropy(a, s, false);
  r.mean_row_entropy_normalized = mean_row_entropy(a, s, true);
  r.colsum_entropy = colsum_entropy(a, s);
  return r;
}

AttentionStatsAccumulator::AttentionStatsAccumulator(int s, int window)
    : s_(std::max(0, s)),
      window_(clamp_window(s_, window)),
      window_start_(s_ - window_),
      column_sums_(s_, 0.0),
      partial_sums_(s_, 0.0f),
      row_entropy_(s_, 0.0),
      window_sum_(window_start_, 0.0),
      window_sq_(window_start_, 0.0) {}

void AttentionStatsAccumulator::fold() const {
  if (partial_rows_ == 0) return;
  for (int j = 0; j < s_; ++j) column_sums_[j] += partial_sums_[j];
  std::fill(partial_sums_.begin(), partial_sums_.end(), 0.0f);
  partial_rows_ = 0;
}

void AttentionStatsAccumulator::add_row(int i, std::span<const float> values, std::span<const int32_t> cols) {
  if (i < 0 || i >= s_) return;
  const bool in_window = i >= window_start_;
  float h = 0.0f;
  float* sums = partial_sums_.data();
  if (cols.empty()) {
    // Columns are key positions 0..n-1: the common case of a cache nothing has left yet. One pass.
    const int n = std::min(static_cast<int>(values.size()), s_);
    const float* v = values.data();
#pragma omp simd reduction(+ : h)
    for (int j = 0; j < n; ++j) {
      sums[j] += v[j];
      h += fast_plogp(v[j]);
    }
    if (in_window)
      for (int j = 0; j < std::min(n, window_start_); ++j) {
        const double p = v[j];
        window_sum_[j] += p;
        window_sq_[j] += p * p;
        window_entropy_ -= p * std::log(p + kCakeEntropyEps);
      }
  } else {
    for (std::size_t k = 0; k < values.size(); ++k) {
      const int j = cols[k];
      if (j < 0 || j >= s_) continue;
      const float p = values[k];
      sums[j] += p;
      h += fast_plogp(p);
      if (in_window && j < window_start_) {
        window_sum_[j] += p;
        window_sq_[j] += static_cast<double>(p) * p;
        window_entropy_ -= p * std::log(static_cast<double>(p) + kCakeEntropyEps);
      }
    }
  }
  row_entropy_[i] -= h;
  // A row given in parts counts once per part here; folding early only costs time, never precision.
  if (++partial_rows_ >= kFoldRows) fold();
}

AttentionStats AttentionStatsAccumulator::finish() const {
  fold();
  AttentionStats r;
  r.cake_window_entropy = window_entropy_;
  for (int j = 0; j < window_start_; ++j) r.cake_column_variance += unbiased_variance(window_sum_[j], window_sq_[j], window_);
  r.d2o_colsum_variance = population_variance(column_sums_);
  double total = 0.0, normalized = 0.0;
  for (int i = 0; i < s_; ++i) {
    total += row_entropy_[i];
    if (i >= 1) normalized += row_entropy_[i] / std::log(i + 1.0);
  }
  r.mean_row_entropy = s_ > 0 ? total / s_ : 0.0;
  r.mean_row_entropy_normalized = s_ > 1 ? normalized / (s_ - 1) : 0.0;
  std::vector<double> p(column_sums_);
  for (double& x : p) x /= s_;
  r.colsum_entropy = entropy_of(p);
  return r;
}

}  // namespace kvscope::analysis
