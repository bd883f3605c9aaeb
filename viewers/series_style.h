#pragma once
// How a line series is told apart from the others: a palette colour, a marker shape and a dash pattern. The
// palette has ten colours, so a figure of more series (a sweep of 4 policies x 4 cache types has 16 curves) gives
// each one a different (colour, marker, dash) triple: series by position take the palette in turn and, past its
// end, the next marker shape and dash pattern; a sweep grid's series take their colour from the policy and their
// marker and dash from the cache type, the encoding a paper's figure of such a grid uses. The window (ImPlot) and
// the exports (figure_vector.h) draw from the same triple.
#include <string>
#include <vector>

namespace kvscope::viewers {

inline constexpr int kPaletteColors = 10;  // figure_style.h's palettes: seaborn deep, tab10
// Marker shapes, in order: circle, square, triangle up, diamond, triangle down (all drawn hollow).
inline constexpr int kMarkerShapes = 5;
// Dash patterns, in order: solid, dashed, dotted, dash-dot.
inline constexpr int kDashPatterns = 4;

struct SeriesStyle {
  int color = 0;   // palette index (figure_style.h's look_series_color), or kInkSeries
  int marker = 0;  // 0 .. kMarkerShapes - 1
  int dash = 0;    // 0 .. kDashPatterns - 1
  bool operator==(const SeriesStyle&) const = default;
};

// The style of the series at `position` in its plot when it asks for none: colours in turn, and after every ten the
// next marker shape and dash pattern, so no two of the first 40 series look alike.
SeriesStyle default_series_style(int position);

// A dash pattern as lengths (on, off, ...) in line widths; empty for solid.
std::vector<double> dash_lengths(int dash);

// Styles for series named as a sweep names them, "policy" or "policy @cache_type" (eval::SweepRow::series): the
// policy picks the colour (in order of first appearance) and the cache type the marker and dash (likewise), so a
// policy keeps its colour across cache types and a cache type its marker across policies. Names without a cache
// type, or all of one, get default_series_style by position.
std::vector<SeriesStyle> sweep_series_styles(const std::vector<std::string>& names);

}  // namespace kvscope::viewers
