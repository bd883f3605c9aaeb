#pragma once
// Random inputs and element-wise comparison shared by the kernel tests (CPU references and GPU kernels).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

namespace kvscope::test {

// n values drawn from N(0, scale^2) with a fixed seed.
inline std::vector<float> random_normal_floats(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Same length, and every value within `margin` of the wanted one (infinities must match exactly).
inline void require_all_close(const std::vector<float>& got, const std::vector<float>& want, double margin) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("index " << i);
    if (std::isinf(want[i]))
      REQUIRE(got[i] == want[i]);
    else
      REQUIRE(got[i] == Approx(want[i]).margin(margin));
  }
}

}  // namespace kvscope::test
