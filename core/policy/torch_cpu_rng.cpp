#include "core/policy/torch_cpu_rng.h"

#include <cmath>
#include <numbers>
#include <random>

namespace kvscope::policy {

std::vector<float> torch_randn_stream(uint32_t seed, std::size_t count) {
  std::mt19937 bits(seed);
  const std::size_t groups = (count + 15) / 16;
  std::vector<float> out(groups * 16);
  double u[16];
  for (std::size_t g = 0; g < groups; ++g) {
    for (double& x : u) x = static_cast<double>(bits() & 0xFFFFFFu) * 0x1p-24;
    for (int j = 0; j < 8; ++j) {
      const double radius = std::sqrt(-2.0 * std::log(1.0 - u[j]));
      const double angle = 2.0 * std::numbers::pi * u[j + 8];
      out[g * 16 + j] = static_cast<float>(radius * std::cos(angle));
      out[g * 16 + 8 + j] = static_cast<float>(radius * std::sin(angle));
    }
  }
  return out;
}

}  // namespace kvscope::policy
