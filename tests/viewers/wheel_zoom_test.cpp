// Wheel zoom steps (viewers/wheel_zoom.h): about 10 notches from a 3,000-token map to 40 tokens, where ImPlot's default
// rate (0.1: a factor 1.2 an event) took 24 events and, with notches merged within a frame, about 50 notches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "viewers/wheel_zoom.h"

using namespace kvscope::viewers;

TEST_CASE("ten wheel notches zoom a 3,000-token map to about 40 tokens, and back out", "[zoom]") {
  int notches = 0;
  for (double span = 3000.0; span > 40.5; span = span_after_notches(span, 1)) ++notches;
  CHECK(notches == 10);
  CHECK(span_after_notches(3000.0, 10) == Approx(40.0).epsilon(0.01));
  // Out again by as many notches: back where it started.
  CHECK(span_after_notches(span_after_notches(3000.0, 10), -10) == Approx(3000.0).epsilon(1e-6));
  // ImPlot's default rate needs more than twice as many events.
  int default_events = 0;
  for (double span = 3000.0; span > 40.5; span /= 1.2) ++default_events;
  CHECK(default_events == 24);
  // Two notches that arrive within one frame (one wheel event of 2) zoom as far as two events of 1.
  const double rate2 = wheel_zoom_rate(2.0f);
  CHECK(1.0 + 2.0 * rate2 == Approx(std::pow(kWheelZoomFactor, 2.0)));
  CHECK(wheel_zoom_rate(-1.0f) == Approx(wheel_zoom_rate(1.0f)));
}
