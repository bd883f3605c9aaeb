// The Compare panel's grid (viewers/compare_layout.h): at the panel sizes of the 1280x720 and 1920x1080 windows
// (View > Large panel), every map is at least as tall as its labels are long, and every cell's text and map fit the
// panel; a panel too small for that scrolls with its maps at their least height, never shorter.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "viewers/compare_layout.h"

using namespace kvscope::viewers;

namespace {

constexpr float kFont = 16.0f, kChar = 8.4f, kLine = 19.0f, kFrame = 23.0f, kSpacing = 4.0f;

// Text of `chars` characters wrapped to `width`: its height with the spacing after it.
float text_h(int chars, float width) {
  const int per_line = std::max(1, static_cast<int>(width / kChar));
  return static_cast<float>((chars + per_line - 1) / per_line) * (kLine - kSpacing) + kSpacing;
}

// The cells the panel draws: runs (name, sliders, map, kept-set strip and line) and the difference (header lines).
CompareCellChrome cell(int i, int runs, float width) {
  CompareCellChrome c;
  if (i < runs) {
    c.above = text_h(13, width) + kFrame + kSpacing;
    c.below = i == 0 ? text_h(129, width) : kFont + kSpacing + text_h(104, width);
    c.least_map = 14 * kChar + 6.0f * kFont;  // "query position"
  } else {
    c.above = kLine + (runs >= 3 ? kFrame : 0.0f) + text_h(50, width) + text_h(64, width) + text_h(44, width) + kSpacing;
    c.least_map = 20 * kChar + 4.5f * kFont;  // "attention difference", its colour bar's title
  }
  return c;
}

CompareGridSpace panel(float width, float height) {
  CompareGridSpace s;
  s.width = width - 5.5f * kFont;  // the runs' shared colour bar
  s.height = height;
  s.spacing_x = 8.0f, s.spacing_y = kSpacing;
  s.min_cell_w = 16.0f * kFont;
  s.axes_w = s.axes_h = 4.5f * kFont;
  return s;
}

}  // namespace

TEST_CASE("compare cells fit the large panel of a 1280x720 and a 1920x1080 window, maps no shorter than their labels",
          "[compare]") {
  struct Case {
    const char* what;
    float width, height;
    int runs;
  };
  // The grid's room with the set-up form beside it (layout compare), measured in those windows.
  for (const Case& k : {Case{"1280x720, two runs", 997, 620, 2}, Case{"1920x1080, two runs", 1510, 970, 2},
                        Case{"1920x1080, four runs", 1510, 970, 4}, Case{"1920x1080, three runs", 1510, 970, 3}}) {
    INFO(k.what);
    const int n = k.runs + 1;
    const CompareGrid g = compare_grid(n, panel(k.width, k.height), [&](int i, float w) { return cell(i, k.runs, w); });
    CHECK(g.fits);
    CHECK(g.height <= k.height + 0.5f);
    for (int i = 0; i < n; ++i) {
      INFO("cell " << i);
      CHECK(g.map_h >= cell(i, k.runs, g.cell_w).least_map);
    }
    CHECK(g.cell_w >= 16.0f * kFont);
  }
  // Two runs and their difference at 1280x720 go in one row: as two rows (the most cells of 22 ems a row, as before)
  // the difference's map was shorter than "attention difference" and ImPlot cut it to "ference".
  const CompareGrid g = compare_grid(3, panel(997, 620), [&](int i, float w) { return cell(i, 2, w); });
  CHECK(g.per_row == 3);
  CHECK(g.rows == 1);
}

TEST_CASE("a compare panel too small for its cells scrolls with every map at its least height", "[compare]") {
  const CompareGrid g = compare_grid(5, panel(997, 620), [&](int i, float w) { return cell(i, 4, w); });
  CHECK_FALSE(g.fits);
  float least = 0;
  for (int i = 0; i < 5; ++i) least = std::max(least, cell(i, 4, g.cell_w).least_map);
  CHECK(g.map_h == Approx(least));
  CHECK(g.height > 620);
  // No layout is offered with cells narrower than the least width.
  CHECK(g.cell_w >= 16.0f * kFont);
}
