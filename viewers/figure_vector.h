#pragma once
// A figure drawn with vector primitives (vector_canvas.h): the SVG and PDF exports of every view, maps
// included (as embedded pictures, each cell flat). Layout for print: titles wrap to their part's width,
// category names turn upright when they do not fit across, legends sit beside the data (never on it),
// parts wrap into rows when a row would make them narrower than a readable map, and maps drawn on one colour
// scale share one colour bar.
#include <string>

#include "viewers/figure.h"
#include "viewers/figure_style.h"
#include "viewers/vector_canvas.h"

namespace kvscope::viewers {

struct VectorOptions {
  double width = 1200, height = 800;  // figure pixels
  double font_px = 16;                // body text; titles are 1.2 times as large
  double dpi = 300;                   // pixels per inch: line widths and tick lengths are set in points
  FigureLook look = FigureLook::Kvscope;
};

void draw_figure_vector(VectorCanvas& canvas, const Figure& figure, const VectorOptions& options);

// The figure as an SVG document, or as a PDF file's bytes.
std::string figure_svg(const Figure& figure, const VectorOptions& options);
std::string figure_pdf(const Figure& figure, const VectorOptions& options);
// The SVG at `width` x `height` pixels with `font_px` text, in the kvscope look.
std::string figure_svg(const Figure& figure, int width, int height, float font_px = 14.0f);

}  // namespace kvscope::viewers
