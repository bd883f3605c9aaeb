#include "core/analysis/attention_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace kvscope::analysis {

namespace {

// The window can never exceed the rows there are; with S <= S_w no key lies before the window.
int clamp_window(int s, int window) { return std::clamp(window, 0, s); }

double plogp(double p) { return p > 0.0 ? p * std::log(p) : 0.0; }

// p ln p for the streamed rows, where std::log is the recorder's hot spot (S^2/2 calls per head and
// layer). ln x = e ln 2 + ln m with m in [sqrt(1/2), sqrt(2)), and ln m = 2 atanh(t), t = (m-1)/(m+1),
// summed through t^9: |t| < 0.172 there, so the first dropped term (2 t^11 / 11) is below 1e-9. Values
// below 1e-30 (and subnormals) contribute p ln p < 1e-28, i.e. 0.
inline float fast_plogp(float p) {
  uint32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  int32_t e = static_cast<int32_t>(bits >> 23) - 127;
  uint32_t mbits = (bits & 0x7fffffu) | 0x3f800000u;
  const uint32_t high = mbits > 0x3fb504f3u ? 1u : 0u;  // m >= sqrt(2): halve it
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

// sum_j p_j ln p_j over a contiguous row. GCC leaves the `omp simd` form of this loop scalar at run
// time, so the AVX2 build spells out the same arithmetic as fast_plogp eight lanes at a time.
float plogp_sum(const float* v, int n) {
  float h = 0.0f;
  int j = 0;
#ifdef __AVX2__
  const __m256i mantissa_mask = _mm256_set1_epi32(0x7fffff), one_bits = _mm256_set1_epi32(0x3f800000);
  const __m256i sqrt2_bits = _mm256_set1_epi32(0x3fb504f3), exponent_one = _mm256_set1_epi32(1 << 23);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f), ln2 = _mm256_set1_ps(0.69314718056f);
  const __m256 tiny = _mm256_set1_ps(1e-30f);
  const __m256 c3 = _mm256_set1_ps(1.0f / 3), c5 = _mm256_set1_ps(1.0f / 5), c7 = _mm256_set1_ps(1.0f / 7),
               c9 = _mm256_set1_ps(1.0f / 9);
  __m256 acc = _mm256_setzero_ps();
  for (; j + 8 <= n; j += 8) {
    const __m256 p = _mm256_loadu_ps(v + j);
    const __m256i bits = _mm256_castps_si256(p);
    __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), bias);
    __m256i mbits = _mm256_or_si256(_mm256_and_si256(bits, mantissa_mask), one_bits);
    const __m256i high = _mm256_cmpgt_epi32(mbits, sqrt2_bits);  // all ones where m > sqrt(2)
    mbits = _mm256_sub_epi32(mbits, _mm256_and_si256(high, exponent_one));
    e = _mm256_sub_epi32(e, high);
    const __m256 m = _mm256_castsi256_ps(mbits);
    const __m256 t = _mm256_div_ps(_mm256_sub_ps(m, one), _mm256_add_ps(m, one));
    const __m256 t2 = _mm256_mul_ps(t, t);
    __m256 series = _mm256_fmadd_ps(t2, c9, c7);
    series = _mm256_fmadd_ps(t2, series, c5);
    series = _mm256_fmadd_ps(t2, series, c3);
    series = _mm256_fmadd_ps(t2, series, one);
    const __m256 ln_m = _mm256_mul_ps(_mm256_mul_ps(two, t), series);
    const __m256 ln = _mm256_fmadd_ps(_mm256_cvtepi32_ps(e), ln2, ln_m);
    const __m256 keep = _mm256_cmp_ps(p, tiny, _CMP_GT_OQ);
    acc = _mm256_add_ps(acc, _mm256_and_ps(keep, _mm256_mul_ps(p, ln)));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float l : lanes) h += l;
#endif
  for (; j < n; ++j) h += fast_plogp(v[j]);
  return h;
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
    for (int j = 0; j < n; ++j) sums[j] += v[j];
    h = plogp_sum(v, n);
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

void AttentionStatsAccumulator::add_sink(int i, double share) {
  if (i < 0 || i >= s_) return;
  sinks_ = true;
  if (share > 0.0) row_entropy_[i] -= share * std::log(share);
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
    if (i >= 1) normalized += row_entropy_[i] / std::log(i + (sinks_ ? 2.0 : 1.0));
  }
  r.mean_row_entropy = s_ > 0 ? total / s_ : 0.0;
  r.mean_row_entropy_normalized = s_ > 1 ? normalized / (s_ - 1) : 0.0;
  std::vector<double> p(column_sums_);
  for (double& x : p) x /= s_;
  r.colsum_entropy = entropy_of(p);
  return r;
}

}  // namespace kvscope::analysis
