#include "core/analysis/output_error.h"

namespace kvscope::analysis {

double output_nmse(const float* compressed, const float* full, std::size_t n) {
  double err = 0.0, ref = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(compressed[i]) - full[i];
    err += d * d;
    ref += static_cast<double>(full[i]) * full[i];
  }
  return ref > 0.0 ? err / ref : 0.0;
}

}  // namespace kvscope::analysis
