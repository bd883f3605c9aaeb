#include "viewers/wheel_zoom.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace kvscope::viewers {

float wheel_zoom_rate(float wheel) {
  const double notches = std::clamp(static_cast<double>(std::fabs(wheel)), 1.0, 8.0);  // a flung wheel, not a jump
  const double factor = std::pow(kWheelZoomFactor, notches);
  // In: (1 + r) / (1 + 2 r) = 1 / factor. Out: 1 + r = factor.
  if (wheel > 0) {
    const double in = std::min(factor, 1.9);
    return static_cast<float>((in - 1.0) / (2.0 - in));
  }
  return static_cast<float>(factor - 1.0);
}

double span_after_notches(double span, int notches, double pointer) {
  for (int i = 0; i < std::abs(notches); ++i) {
    const float wheel = notches > 0 ? 1.0f : -1.0f;
    const double r = wheel_zoom_rate(wheel);
    // ImPlot moves the left edge by span * pointer * z and the right by span * (1 - pointer) * z, outwards, with
    // z = r out and z = -r / (1 + 2 r) in.
    const double z = wheel > 0 ? -r / (1.0 + 2.0 * r) : r;
    const double left = -span * pointer * z, right = span + span * (1.0 - pointer) * z;
    span = right - left;
  }
  return span;
}

}  // namespace kvscope::viewers
