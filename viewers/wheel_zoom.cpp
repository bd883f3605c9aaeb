#include "viewers/wheel_zoom.h"

#include <cmath>
#include <algorithm>
#include <cstdlib>

namespace kvscope::viewers {

float wheel_zoom_rate(float wheel) {
  const double notches = std::min(8.0, static_cast<double>(std::fabs(wheel)));  // a flung wheel, not a jump to a cell
  return static_cast<float>((std::pow(kWheelZoomFactor, notches > 0 ? notches : 1.0) - 1.0) / 2.0);
}

double span_after_notches(double span, int notches) {
  // One event per notch, as a wheel turned slowly delivers them; ImPlot's own arithmetic (implot.cpp, SCROLL INPUT).
  for (int i = 0; i < std::abs(notches); ++i) {
    const double rate = wheel_zoom_rate(1.0f);
    span *= notches > 0 ? 1.0 - 2.0 * (rate / (1.0 + 2.0 * rate)) : 1.0 + 2.0 * rate;
  }
  return span;
}

}  // namespace kvscope::viewers
