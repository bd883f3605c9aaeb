// Wheel zoom steps (viewers/wheel_zoom.h): about 10 notches from a 3,000-token map to 40 tokens. ImPlot's default rate
// (0.1: in by 1.1 / 1.2 an event) took 50 notches, as the issue measured.
#include <catch2/catch.hpp>

#include <cmath>

#include "viewers/wheel_zoom.h"

using namespace kvscope::viewers;

TEST_CASE("ten wheel notches zoom a 3,000-token map to about 40 tokens, and back out", "[zoom]") {
  int notches = 0;
  for (double span = 3000.0; span > 40.5; span = span_after_notches(span, 1, 0.3)) ++notches;
  CHECK(notches == 10);
  CHECK(span_after_notches(3000.0, 10, 0.3) == Approx(40.0).epsilon(0.01));
  // Out again by as many notches: back where it started (the pointer's place does not change the span).
  CHECK(span_after_notches(span_after_notches(3000.0, 10, 0.3), -10, 0.8) == Approx(3000.0).epsilon(1e-6));
  // ImPlot's default rate, with the same arithmetic (implot.cpp): 50 notches.
  int default_notches = 0;
  for (double span = 3000.0; span > 40.5; span *= (1.0 + 0.1) / (1.0 + 2 * 0.1)) ++default_notches;
  CHECK(default_notches == 50);
  // Two notches that arrived within one frame (one wheel event of 2) zoom out as far as two events of 1; in, one ImPlot
  // event cannot zoom by 2 or more, so they zoom by 1.9 (more than one notch's 1.54), never by a negative rate.
  CHECK(1.0 + wheel_zoom_rate(-2.0f) == Approx(std::pow(kWheelZoomFactor, 2.0)));
  const double r2 = wheel_zoom_rate(2.0f);
  CHECK(r2 > 0.0);
  CHECK((1.0 + r2) / (1.0 + 2.0 * r2) == Approx(1.0 / 1.9));
}
