// Where the attention map's key-mark strip is drawn (viewers/figure.h, key_strip_pixels): below the map's last row
// when that is on screen, else pinned to the bottom of the plot area, so a token zoom into earlier rows still shows
// which keys were evicted (issue 38: before, it was drawn below the last row only, off screen at token zoom, and a
// band rows tall when that row was in view).
#include <catch2/catch.hpp>

#include "viewers/figure.h"

using namespace kvscope::viewers;

TEST_CASE("the key-mark strip stays on screen and a constant size at any zoom", "[figure]") {
  const float font = 15.0f, top = 100.0f, bottom = 700.0f;
  // The whole map: its last row at pixel 670, the strip's space 670..690 (3.5 % of the rows).
  const KeyStripPixels whole = key_strip_pixels(670.0f, 690.0f, top, bottom, font);
  CHECK_FALSE(whole.pinned);
  CHECK(whole.top > 670.0f);
  CHECK(whole.bottom <= 690.0f);
  CHECK(whole.bottom - whole.top == Approx(font));  // 0.85 of the 20 px, at most one em
  // Zoomed into rows 1000..1040 of 2,897: the last row is thousands of pixels below the area. The strip is pinned
  // to the area's bottom edge, one em tall, inside the area.
  const KeyStripPixels zoomed = key_strip_pixels(42000.0f, 44000.0f, top, bottom, font);
  CHECK(zoomed.pinned);
  CHECK(zoomed.bottom == Approx(bottom));
  CHECK(zoomed.bottom - zoomed.top == Approx(font));
  // Zoomed near the end: the last row in view, the strip's reserved space hundreds of pixels tall. The strip is
  // drawn just below the row at one em, not as a band as tall as that space.
  const KeyStripPixels near_end = key_strip_pixels(400.0f, 1200.0f, top, bottom, font);
  CHECK_FALSE(near_end.pinned);
  CHECK(near_end.top == Approx(400.0f + 0.15f * font));
  CHECK(near_end.bottom - near_end.top == Approx(font));
  // A tiny plot: never taller than the area allows, never above it.
  const KeyStripPixels tiny = key_strip_pixels(5000.0f, 5100.0f, 0.0f, 6.0f, font);
  CHECK(tiny.top >= 0.0f);
}
