// The __host__ __device__ math of kernels/common against direct formulas, on the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/common/merge_math.h"
#include "kernels/common/rope_math.h"
#include "kernels/common/softmax_math.h"

using namespace kvscope;

namespace {
std::vector<float> random_scores(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

double direct_log_sum_exp(const std::vector<float>& x) {
  double sum = 0.0;
  for (float v : x) sum += std::exp(static_cast<double>(v));
  return std::log(sum);
}
}  // namespace

TEST_CASE("online softmax reaches log(sum exp x) in any order and in tiles") {
  const auto x = random_scores(200, 3);
  kernels::OnlineSoftmax whole;
  for (float v : x) kernels::online_softmax_add(whole, v);
  CHECK(whole.log_sum_exp() == Approx(direct_log_sum_exp(x)).epsilon(1e-5));

  // Tiles of 32 combined afterwards, as the attention kernels do.
  kernels::OnlineSoftmax tiled;
  for (std::size_t t0 = 0; t0 < x.size(); t0 += 32) {
    kernels::OnlineSoftmax tile;
    for (std::size_t i = t0; i < std::min(x.size(), t0 + 32); ++i) kernels::online_softmax_add(tile, x[i]);
    tiled = kernels::online_softmax_combine(tiled, tile);
  }
  CHECK(tiled.log_sum_exp() == Approx(direct_log_sum_exp(x)).epsilon(1e-5));

  double total = 0.0;
  for (float v : x) total += kernels::softmax_probability(v, whole.log_sum_exp());
  CHECK(total == Approx(1.0).epsilon(1e-5));
}

TEST_CASE("online softmax of nothing, or of masked scores only, is empty") {
  kernels::OnlineSoftmax s;
  kernels::online_softmax_add(s, -INFINITY);
  CHECK(s.sum == 0.0f);
  CHECK(s.log_sum_exp() == -INFINITY);
  CHECK(kernels::online_softmax_combine(s, kernels::OnlineSoftmax{}).log_sum_exp() == -INFINITY);
  CHECK(kernels::softmax_probability(-INFINITY, 0.0f) == 0.0f);
  // A single score x has log-sum-exp x.
  kernels::online_softmax_add(s, 2.5f);
  CHECK(s.log_sum_exp() == Approx(2.5f));
}

TEST_CASE("rms_inverse and swiglu_element follow their definitions") {
  // x = (3, 4): mean square 12.5.
  CHECK(kernels::rms_inverse(25.0, 2, 0.0f) == Approx(1.0 / std::sqrt(12.5)));
  CHECK(kernels::rms_inverse(0.0, 4, 1e-6f) == Approx(1000.0).epsilon(1e-4));
  CHECK(kernels::swiglu_element(0.0f, 5.0f) == 0.0f);  // silu(0) = 0
  CHECK(kernels::swiglu_element(2.0f, 3.0f) == Approx(2.0 / (1.0 + std::exp(-2.0)) * 3.0));
}

TEST_CASE("rope pair indices: neighbours or halves") {
  int a = 0, b = 0;
  kernels::rope_pair_indices(true, 5, 64, &a, &b);
  CHECK((a == 10 && b == 11));
  kernels::rope_pair_indices(false, 5, 64, &a, &b);
  CHECK((a == 5 && b == 37));
  // A rotation by theta = position * base^(-2i/d) keeps the norm and at position 0 changes nothing.
  float x = 0.6f, y = -0.8f;
  kernels::rope_rotate_pair(x, y, 3, 64, 0, 10000.0f);
  CHECK((x == 0.6f && y == -0.8f));
  kernels::rope_rotate_pair(x, y, 0, 64, 1, 10000.0f);  // pair 0: theta = 1 rad
  CHECK(x == Approx(0.6 * std::cos(1.0) + 0.8 * std::sin(1.0)));
  CHECK(y == Approx(0.6 * std::sin(1.0) - 0.8 * std::cos(1.0)));
}

TEST_CASE("merged_element sums weight times member row, target first") {
  // Rows r_i = (i, 10 i): a merge of rows 2 (target), 0 and 3 with weights 0.5, 0.25, 0.25.
  const std::vector<float> rows = {0, 0, 1, 10, 2, 20, 3, 30};
  const std::vector<int32_t> members = {2, 0, 3};
  const std::vector<float> weights = {0.5f, 0.25f, 0.25f};
  CHECK(kernels::merged_element(rows.data(), 2, members.data(), weights.data(), 3, 0) == Approx(1.75));
  CHECK(kernels::merged_element(rows.data(), 2, members.data(), weights.data(), 3, 1) == Approx(17.5));
}

TEST_CASE("gaussian_merge_weight is exp(-d^2 / 2 sigma^2) with its limits") {
  CHECK(kernels::gaussian_merge_weight(1.0, 1.0) == Approx(std::exp(-0.5)));
  CHECK(kernels::gaussian_merge_weight(2.0, 0.5) == Approx(std::exp(-8.0)));
  CHECK(kernels::gaussian_merge_weight(0.0, 0.0) == 1.0);
  CHECK(kernels::gaussian_merge_weight(0.3, 0.0) == 0.0);
}

TEST_CASE("caote_squared_error is (alpha / (1 - alpha))^2 * ||X - v||^2, clamped near alpha = 1") {
  CHECK(kernels::caote_squared_error(0.5, 3.0) == Approx(3.0));
  CHECK(kernels::caote_squared_error(0.2, 2.0) == Approx(0.0625 * 2.0));
  CHECK(kernels::caote_squared_error(0.0, 7.0) == 0.0);
  CHECK(kernels::caote_squared_error(1.0, 1.0) == Approx(1e12));
}
