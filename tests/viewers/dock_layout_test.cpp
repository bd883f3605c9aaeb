// The default layout's proportions (viewers/dock_layout.h): unchanged at 1600x1000, and at 1280x720 the attention map's
// node holds more than half the window's height (it was 334 px of 674, most of it toolbar, leaving an 80-px map).
#include <catch2/catch.hpp>

#include "viewers/dock_layout.h"

using namespace kvscope::viewers;

TEST_CASE("the default layout gives the attention map room at 1280x720 and keeps 1600x1000 as it was", "[layout]") {
  const float font = 15.0f;
  const DockRatios big = dock_ratios(1600.0f, 950.0f, font);
  CHECK(big.left == 0.23f);
  CHECK(big.tokens == 0.17f);
  CHECK(big.lower == 0.40f);
  CHECK(big.stats == 0.42f);
  // 1280x720 less the menu and status bars.
  const DockRatios small = dock_ratios(1280.0f, 674.0f, font);
  const DockRatios old_ratios;
  CHECK(attention_node_height(old_ratios, 674.0f) == Approx(335.7f).epsilon(0.01));
  CHECK(attention_node_height(small, 674.0f) > 0.55f * 674.0f);
  CHECK(attention_node_width(small, 1280.0f) > 600.0f);
  // Layer stats and Budgets stack in a column of their own (half its height each) instead of crushed rows.
  CHECK(small.stacked_right);
  CHECK_FALSE(big.stacked_right);
  // The Tokens strip keeps four lines of text, the set-up column 20 em.
  CHECK(small.tokens * 674.0f * (1.0f - 0.0f) >= 4.0f * font);
  CHECK(small.left * 1280.0f >= 19.9f * font);
  // 1920x1080 is a large screen: the usual proportions.
  const DockRatios hd = dock_ratios(1920.0f, 1034.0f, font);
  CHECK(hd.lower == 0.40f);
  CHECK(hd.stats == 0.42f);
}
