#pragma once
// Figure sizes for print: a journal column (3.3 in) or a page's text width (7 in) at a resolution, or
// explicit pixels or inches. A column or page figure is as tall as its parts need (figure_height).
#include <string>

#include "viewers/figure.h"

namespace kvscope::viewers {

inline constexpr double kColumnInches = 3.3, kPageInches = 7.0;

struct FigureSize {
  int width = 1200, height = 800;  // pixels
  bool auto_height = false;        // "column" or "page": the figure's own height (figure_height)
  double points = 0;               // the font size these presets set, in points (0: the renderer's default)
};

// "column", "page", "WxH" (pixels, e.g. 1200x800) or "WxHin" (inches, e.g. 3.3x2.5in), at `dpi`. Throws
// UsageError naming the forms for anything else or a size outside 64..16384 pixels a side.
FigureSize parse_figure_size(const std::string& text, double dpi);

// The height a figure of `width` pixels wants with text `font_px` high: maps near square, line plots at
// matplotlib's 4:3, parts wrapped into rows as the vector and PNG layouts wrap them.
int figure_height(const Figure& figure, int width, double font_px);

// The width of a colour bar shared by several maps, in ems of the figure's text (the renderers' grids leave it free).
inline constexpr double kColorbarEm = 5.5;
// The room such bars take at the right of `figure`.
double shared_colorbar_reserve(const Figure& figure, double font_px);

// Parts per row for a figure `width` pixels wide (shared colour bars included) with text `font_px` high: as many as
// keep each readable (a map at least 10 ems, at most three maps a row; a line plot 14 ems), rows balanced (five maps go 3 + 2, not 4 + 1).
int parts_per_row(const Figure& figure, double width, double font_px);

}  // namespace kvscope::viewers
