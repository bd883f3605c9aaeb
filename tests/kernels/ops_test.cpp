// Each CPU op against a direct reference loop written here.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/common/dequantize.h"

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
  for (auto style : {model::RopeStyle::AdjacentPairs, model::RopeStyle::HalfSplit}) {
    auto out = v;
    kernels::rope(out.data(), heads, d, d, pos, base, style);
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < d / 2; ++i) {
        const int a = style == model::RopeStyle::AdjacentPairs ? 2 * i : i;
        const int b = style == model::RopeStyle::AdjacentPairs ? 2 * i + 1 : i + d / 2;
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
  model::QuantMatrix m{model::GgmlType::F32, rows, cols, reinterpret_cast<const uint8_t*>(w.data()), cols * sizeof(float)};
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
