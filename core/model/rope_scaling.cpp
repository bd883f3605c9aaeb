#include "core/model/rope_scaling.h"

#include <cmath>
#include <numbers>

namespace kvscope::model {

std::vector<float> rope_freq_divisors(const RopeScaling& scaling, int rope_dim, double base) {
  if (scaling.type == "default") return {};
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
