#include "core/model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kvscope::model {

double yarn_default_attention_factor(double factor) { return factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0; }

namespace {

// transformers' _compute_yarn_parameters: pair i's frequency is blended between freq / factor (interpolated) and
// freq (extrapolated) by a linear ramp over the pair index between the dimensions where a wavelength turns
// beta_fast and beta_slow times within the original context; the divisor is the reciprocal of the blend.
// llama.cpp's rope_yarn blends the angles (position times each frequency) with the same weights, its ramp scaled by
// ext_factor: the extrapolated share of pair i is (1 - ramp_i) * ext_factor.
std::vector<float> yarn_divisors(const RopeScaling& scaling, int rope_dim, double base) {
  const auto correction_dim = [&](double rotations) {
    return rope_dim * std::log(scaling.original_context / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  double low = correction_dim(scaling.beta_fast), high = correction_dim(scaling.beta_slow);
  if (scaling.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, rope_dim - 1.0);
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  std::vector<float> divisors(static_cast<std::size_t>(rope_dim / 2));
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);  // 0: extrapolated, 1: interpolated
    const double extrapolated = (1.0 - ramp) * scaling.ext_factor;
    divisors[static_cast<std::size_t>(i)] =
        static_cast<float>(1.0 / ((1.0 - extrapolated) / scaling.factor + extrapolated));
  }
  return divisors;
}

}  // namespace

std::vector<float> rope_freq_divisors(const RopeScaling& scaling, int rope_dim, double base) {
  if (scaling.type == "default") return {};
  if (scaling.type == "yarn") return yarn_divisors(scaling, rope_dim, base);
  if (scaling.type == "longrope") return scaling.short_factor;  // inv_freq = 1 / (factor_i * base^(2i/d))
  std::vector<float> divisors(static_cast<std::size_t>(rope_dim / 2), static_cast<float>(scaling.factor));
  if (scaling.type == "linear") return divisors;  // theta_i = (position / factor) * base^(-2i/d)
  // Llama 3.1 (transformers _compute_llama3_parameters): wavelengths longer than original_context / low_freq_factor
  // are slowed by `factor`, shorter than original_context / high_freq_factor kept, and those between blended
  // linearly in original_context / wavelength.
  const double low_wavelength = scaling.original_context / scaling.low_freq_factor;
  const double high_wavelength = scaling.original_context / scaling.high_freq_factor;
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double freq = std::pow(base, -2.0 * i / rope_dim);
    const double wavelength = 2.0 * std::numbers::pi / freq;
    double scaled = freq;
    if (wavelength > low_wavelength) {
      scaled = freq / scaling.factor;
    } else if (wavelength >= high_wavelength) {
      const double smooth = (scaling.original_context / wavelength - scaling.low_freq_factor) /
                            (scaling.high_freq_factor - scaling.low_freq_factor);
      scaled = (1.0 - smooth) * freq / scaling.factor + smooth * freq;
    }
    divisors[static_cast<std::size_t>(i)] = static_cast<float>(freq / scaled);
  }
  return divisors;
}

}  // namespace kvscope::model
