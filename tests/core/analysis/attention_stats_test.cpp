// Attention statistics against explicit loops written here from the papers' definitions, and closed forms.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "core/analysis/attention_stats.h"
#include "core/analysis/output_error.h"

using namespace kvscope::analysis;

namespace {

// A causal softmax matrix of random logits, S x S row-major.
std::vector<float> causal_softmax(int s, unsigned seed, float scale = 3.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> a(static_cast<std::size_t>(s) * s, 0.0f);
  for (int i = 0; i < s; ++i) {
    std::vector<double> e(i + 1);
    double z = 0.0;
    for (int j = 0; j <= i; ++j) z += e[j] = std::exp(g(rng));
    for (int j = 0; j <= i; ++j) a[static_cast<std::size_t>(i) * s + j] = static_cast<float>(e[j] / z);
  }
  return a;
}

struct Reference {
  double cake_h = 0, cake_v = 0, d2o = 0, row_h = 0, row_h_norm = 0, col_h = 0;
};

// Written from the definitions: CAKE Eq. 4-5 on Obs = A[S-w:S, 0:S-w] (two-pass unbiased variance), D2O
// Eq. 4 (population variance of column sums), row entropy (D2O A.9 Eq. 21).
Reference reference(const std::vector<float>& a, int s, int w) {
  Reference r;
  auto A = [&](int i, int j) { return static_cast<double>(a[static_cast<std::size_t>(i) * s + j]); };
  for (int i = s - w; i < s; ++i)
    for (int j = 0; j < s - w; ++j) r.cake_h -= A(i, j) * std::log(A(i, j) + 1e-10);
  for (int j = 0; j < s - w; ++j) {
    double mean = 0;
    for (int i = s - w; i < s; ++i) mean += A(i, j);
    mean /= w;
    double var = 0;
    for (int i = s - w; i < s; ++i) var += (A(i, j) - mean) * (A(i, j) - mean);
    r.cake_v += var / (w - 1);
  }
  std::vector<double> col(s, 0.0);
  for (int i = 0; i < s; ++i)
    for (int j = 0; j < s; ++j) col[j] += A(i, j);
  double mean = 0;
  for (double c : col) mean += c;
  mean /= s;
  for (double c : col) r.d2o += (c - mean) * (c - mean) / s;
  for (int i = 0; i < s; ++i) {
    double h = 0;
    for (int j = 0; j < s; ++j)
      if (A(i, j) > 0) h -= A(i, j) * std::log(A(i, j));
    r.row_h += h / s;
    if (i >= 1) r.row_h_norm += h / std::log(i + 1.0) / (s - 1);
  }
  for (double c : col)
    if (c > 0) r.col_h -= (c / s) * std::log(c / s);
  return r;
}

// The streamed path (the recorder's hot loop) uses a float logarithm accurate to ~1e-7 per term and float
// partial column sums over 32 rows, so it is checked to 1e-5 relative; the direct functions are double
// precision throughout and checked to 1e-9.
void check_matches(const AttentionStats& got, const Reference& want, double eps) {
  CHECK(got.cake_window_entropy == Approx(want.cake_h).epsilon(1e-9));
  CHECK(got.cake_column_variance == Approx(want.cake_v).epsilon(1e-9));
  CHECK(got.d2o_colsum_variance == Approx(want.d2o).epsilon(eps));
  CHECK(got.mean_row_entropy == Approx(want.row_h).epsilon(eps));
  CHECK(got.mean_row_entropy_normalized == Approx(want.row_h_norm).epsilon(eps));
  CHECK(got.colsum_entropy == Approx(want.col_h).epsilon(eps));
}

}  // namespace

TEST_CASE("attention statistics on an explicit matrix match direct loops", "[attention_stats]") {
  for (int s : {40, 97}) {
    const auto a = causal_softmax(s, 17u + s);
    const Reference want = reference(a, s, 32);
    check_matches(attention_stats(a.data(), s, 32), want, 1e-9);

    // Streamed in blocks of 7 rows, rows out of order, each row split with explicit column positions.
    AttentionStatsAccumulator acc(s, 32);
    for (int start = ((s - 1) / 7) * 7; start >= 0; start -= 7)
      for (int i = start; i < std::min(s, start + 7); ++i) {
        const float* row = a.data() + static_cast<std::size_t>(i) * s;
        std::vector<int32_t> odd, even;
        std::vector<float> odd_v, even_v;
        for (int j = 0; j <= i; ++j) {
          (j % 2 ? odd : even).push_back(j);
          (j % 2 ? odd_v : even_v).push_back(row[j]);
        }
        acc.add_row(i, odd_v, odd);
        acc.add_row(i, even_v, even);
      }
    check_matches(acc.finish(), want, 1e-5);

    // The contiguous fast path (no column positions), in row blocks as the engine streams them.
    AttentionStatsAccumulator fast(s, 32);
    for (int i = 0; i < s; ++i) fast.add_row(i, std::span<const float>(a.data() + static_cast<std::size_t>(i) * s, i + 1));
    check_matches(fast.finish(), want, 1e-5);
  }
}

TEST_CASE("uniform causal attention has the closed-form statistics", "[attention_stats]") {
  const int s = 64;
  std::vector<float> a(static_cast<std::size_t>(s) * s, 0.0f);
  for (int i = 0; i < s; ++i)
    for (int j = 0; j <= i; ++j) a[static_cast<std::size_t>(i) * s + j] = 1.0f / (i + 1);
  const AttentionStats st = attention_stats(a.data(), s, 32);
  // Row i is uniform over i+1 keys: H = ln(i+1); normalised, every row scores 1.
  double mean_h = 0;
  for (int i = 0; i < s; ++i) mean_h += std::log(i + 1.0) / s;
  CHECK(st.mean_row_entropy == Approx(mean_h).epsilon(1e-6));
  CHECK(st.mean_row_entropy_normalized == Approx(1.0).epsilon(1e-6));
  // Column sums s_j = sum_{i>=j} 1/(i+1) = H_S - H_j; their mean is 1 (every row sums to 1).
  std::vector<double> col(s);
  double harmonic_s = 0;
  for (int i = 1; i <= s; ++i) harmonic_s += 1.0 / i;
  double harmonic_j = 0, var = 0;
  for (int j = 0; j < s; ++j) {
    col[j] = harmonic_s - harmonic_j;
    harmonic_j += 1.0 / (j + 1);
    var += (col[j] - 1.0) * (col[j] - 1.0) / s;
  }
  CHECK(st.d2o_colsum_variance == Approx(var).epsilon(1e-5));
  // CAKE window: row i holds 1/(i+1) on each of the S-w keys before the window.
  double h = 0;
  for (int i = s - 32; i < s; ++i) h -= (s - 32) * (1.0 / (i + 1)) * std::log(1.0 / (i + 1) + 1e-10);
  double m = 0, q = 0;
  for (int i = s - 32; i < s; ++i) {
    m += 1.0 / (i + 1);
    q += 1.0 / ((i + 1.0) * (i + 1.0));
  }
  const double v = (s - 32) * (q - m * m / 32) / 31;
  CHECK(st.cake_window_entropy == Approx(h).epsilon(1e-5));
  CHECK(st.cake_column_variance == Approx(v).epsilon(1e-4));
}

TEST_CASE("identity attention: no dispersion, flat column sums", "[attention_stats]") {
  const int s = 50;
  std::vector<float> a(static_cast<std::size_t>(s) * s, 0.0f);
  for (int i = 0; i < s; ++i) a[static_cast<std::size_t>(i) * s + i] = 1.0f;
  const AttentionStats st = attention_stats(a.data(), s, 32);
  CHECK(st.mean_row_entropy == Approx(0.0).margin(1e-12));
  CHECK(st.d2o_colsum_variance == Approx(0.0).margin(1e-12));
  CHECK(st.colsum_entropy == Approx(std::log(50.0)).epsilon(1e-9));
  CHECK(st.cake_window_entropy == Approx(0.0).margin(1e-12));  // Obs is all zeros
  CHECK(st.cake_column_variance == Approx(0.0).margin(1e-12));
}

TEST_CASE("prompts no longer than the window have no CAKE observation keys", "[attention_stats]") {
  const auto a = causal_softmax(20, 3u);
  const AttentionStats st = attention_stats(a.data(), 20, 32);
  CHECK(st.cake_window_entropy == 0.0);
  CHECK(st.cake_column_variance == 0.0);
  AttentionStatsAccumulator acc(20, 32);
  for (int i = 0; i < 20; ++i) acc.add_row(i, std::span<const float>(a.data() + i * 20, 20));
  CHECK(acc.finish().cake_window_entropy == 0.0);
}

TEST_CASE("output NMSE is ||c - f||^2 / ||f||^2", "[output_error]") {
  const std::vector<float> full = {1.0f, 2.0f, -2.0f}, comp = {1.0f, 1.0f, -2.0f};
  CHECK(output_nmse(comp.data(), full.data(), 3) == Approx(1.0 / 9.0));
  CHECK(output_nmse(full.data(), full.data(), 3) == 0.0);
  const std::vector<float> zero(3, 0.0f);
  CHECK(output_nmse(comp.data(), zero.data(), 3) == 0.0);
}

TEST_CASE("streamed row entropy stays accurate across the whole float range", "[attention_stats]") {
  // Rows mixing tiny, subnormal, mid and near-1 probabilities exercise the fast logarithm's range reduction.
  const std::vector<float> row = {1e-38f, 1e-30f, 3e-20f, 1e-9f, 1e-4f, 0.01f, 0.1f, 0.2f, 0.29f, 0.4f - 1e-4f, 0.0f};
  AttentionStatsAccumulator acc(static_cast<int>(row.size()), 32);
  acc.add_row(static_cast<int>(row.size()) - 1, row);
  double want = 0;
  for (float p : row)
    if (p > 0) want -= static_cast<double>(p) * std::log(static_cast<double>(p));
  CHECK(acc.finish().mean_row_entropy * row.size() == Approx(want).epsilon(1e-6));
}
