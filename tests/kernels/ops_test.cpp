// Each CPU op against a direct reference loop written here.
#include <catch2/catch.hpp>

#include <immintrin.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/common/dequantize.h"
#include "kernels/cpu/vector_exp.h"

using namespace kvscope;

namespace {
std::vector<float> random_vector(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
}  // namespace

TEST_CASE("rmsnorm matches the definition x / sqrt(mean(x^2) + eps) * w") {
  const int dim = 96;
  auto x = random_vector(dim, 1), w = random_vector(dim, 2);
  std::vector<float> out(dim);
  kernels::rmsnorm(x.data(), w.data(), dim, 1e-5f, out.data());
  double ms = 0;
  for (float v : x) ms += double(v) * v;
  ms /= dim;
  for (int i = 0; i < dim; ++i) REQUIRE(out[i] == Approx(x[i] / std::sqrt(ms + 1e-5) * w[i]).epsilon(1e-5));
}

TEST_CASE("softmax sums to one and is invariant to shifts") {
  auto x = random_vector(50, 3, 10.0f);
  auto shifted = x;
  for (auto& v : shifted) v += 1000.0f;
  kernels::softmax(x.data(), 50);
  kernels::softmax(shifted.data(), 50);
  double sum = 0;
  for (int i = 0; i < 50; ++i) {
    sum += x[i];
    REQUIRE(x[i] == Approx(shifted[i]).margin(1e-6));
  }
  REQUIRE(sum == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("the vector exp is within 2 ulp of exp over softmax's range, and 0 below -87") {
  std::vector<float> x;
  for (float v = -87.0f; v <= 10.0f; v += 0.001953125f) x.push_back(v);  // every 2^-9 step, 49 664 values
  for (std::size_t i = 0; i < x.size(); i += 8) {
    alignas(32) float in[8], out[8];
    for (int j = 0; j < 8; ++j) in[j] = i + j < x.size() ? x[i + j] : 0.0f;
    _mm256_store_ps(out, kernels::cpu::exp8(_mm256_load_ps(in)));
    for (int j = 0; j < 8; ++j) {
      const double exact = std::exp(static_cast<double>(in[j]));
      INFO("x = " << in[j]);
      REQUIRE(std::abs(out[j] - exact) <= 2.0 * std::ldexp(1.0, -23) * exact);
    }
  }
  alignas(32) float tiny[8] = {-87.5f, -100.0f, -1e30f, -std::numeric_limits<float>::infinity(), -90, -88, -87.01f, -200};
  alignas(32) float out[8];
  _mm256_store_ps(out, kernels::cpu::exp8(_mm256_load_ps(tiny)));
  for (float v : out) CHECK(v == 0.0f);
}

TEST_CASE("softmax_lse gives the probabilities and log sum exp of a direct loop in double, tails included") {
  for (int n : {1, 7, 8, 9, 50, 1001}) {
    INFO("n = " << n);
    auto x = random_vector(n, 40 + n, 4.0f);
    double max_value = -1e300, sum = 0;
    for (float v : x) max_value = std::max(max_value, double(v));
    for (float v : x) sum += std::exp(double(v) - max_value);
    std::vector<double> expected(n);
    for (int i = 0; i < n; ++i) expected[i] = std::exp(double(x[i]) - max_value) / sum;
    const float lse = kernels::softmax_lse(x.data(), n);
    REQUIRE(lse == Approx(max_value + std::log(sum)).epsilon(1e-6));
    for (int i = 0; i < n; ++i) REQUIRE(x[i] == Approx(expected[i]).epsilon(1e-6).margin(1e-12));
  }
}

TEST_CASE("swiglu is silu(gate) * up") {
  auto g = random_vector(20, 4), u = random_vector(20, 5);
  std::vector<float> out(20);
  kernels::swiglu(g.data(), u.data(), out.data(), 20);
  for (int i = 0; i < 20; ++i) REQUIRE(out[i] == Approx(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]).epsilon(1e-5));
}

TEST_CASE("rope rotates pairs by position * base^(-2i/d) in both pairings") {
  const int heads = 2, d = 8, pos = 7;
  const float base = 10000.0f;
  auto v = random_vector(heads * d, 6);
  for (auto style : {kernels::RopeStyle::AdjacentPairs, kernels::RopeStyle::HalfSplit}) {
    auto out = v;
    kernels::rope(out.data(), heads, d, d, pos, base, style);
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < d / 2; ++i) {
        const int a = style == kernels::RopeStyle::AdjacentPairs ? 2 * i : i;
        const int b = style == kernels::RopeStyle::AdjacentPairs ? 2 * i + 1 : i + d / 2;
        const double theta = pos * std::pow(double(base), -2.0 * i / d);
        const double x = v[h * d + a], y = v[h * d + b];
        REQUIRE(out[h * d + a] == Approx(x * std::cos(theta) - y * std::sin(theta)).margin(1e-5));
        REQUIRE(out[h * d + b] == Approx(x * std::sin(theta) + y * std::cos(theta)).margin(1e-5));
      }
  }
}

TEST_CASE("matmul equals a direct triple loop for F32 weights, decode and prefill sizes") {
  const int rows = 37, cols = 64;
  auto w = random_vector(rows * cols, 7);
  kernels::QuantMatrix m{kernels::GgmlType::F32, rows, cols, reinterpret_cast<const uint8_t*>(w.data()), cols * sizeof(float)};
  for (int n : {1, 3, 17}) {
    auto x = random_vector(n * cols, 8 + n);
    std::vector<float> y(n * rows);
    kernels::matmul(m, x.data(), n, y.data());
    for (int i = 0; i < n; ++i)
      for (int r = 0; r < rows; ++r) {
        double s = 0;
        for (int c = 0; c < cols; ++c) s += double(w[r * cols + c]) * x[i * cols + c];
        REQUIRE(y[i * rows + r] == Approx(s).margin(1e-4));
      }
  }
}
