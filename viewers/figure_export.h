#pragma once
// Figures to files without a display: an ImGui + ImPlot context of its own (no window, no OpenGL) and the
// software rasteriser turn draw lists into pixels. A PNG is the vector drawing of the figure (figure_vector.h,
// the one SVG and PDF are written from) rasterised, so the three formats look alike; only a dark PNG is ImPlot's
// drawing, as the window shows it. The window's export menu and `kvscope figure` both come through here.
#include <memory>
#include <string>
#include <vector>

#include "viewers/figure.h"
#include "viewers/figure_style.h"
#include "viewers/figure_vector.h"
#include "viewers/image.h"

struct ImGuiContext;
struct ImPlotContext;

namespace kvscope::viewers {

struct ExportOptions {
  int width = 1200, height = 800;
  float font_px = 0.0f;   // 0: scaled with the figure (height / 50, at least 13)
  bool dark = false;      // the window's dark style, drawn by ImPlot (PNG only); off: the print drawing, on white
  FigureLook look = FigureLook::Kvscope;
  double dpi = 300;       // pixels per inch: a PDF's page size, and the resolution a PNG says it has
};

// The options for a size as `kvscope figure --size` takes it (figure_size.h; empty: 1200x800), a look and a
// resolution: print sizes set the text in points (9 pt; matplotlib's 10 pt in its look) and column and page figures
// are as tall as `figure` needs. `font_px` > 0 overrides the text size.
ExportOptions sized_export(const Figure& figure, const std::string& size, FigureLook look, double dpi = 300,
                           float font_px = 0.0f);

// The font size an export uses: options.font_px, or the default for its height.
float export_font_px(const ExportOptions& options);

// The vector writers' options for an export's.
VectorOptions vector_options(const ExportOptions& options);

// Where a tick label was drawn, in figure pixels.
struct TickLabelBox {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  std::string text;
  int axis = 0;           // one number per (plot, axis) of the figure
  bool vertical = false;  // a y axis
  float axis_pixels = 0;  // the plot area's length along that axis
};

class FigureRenderer {
 public:
  FigureRenderer();
  ~FigureRenderer();
  FigureRenderer(const FigureRenderer&) = delete;
  FigureRenderer& operator=(const FigureRenderer&) = delete;

  // Renders on the calling thread: the vector drawing (as SVG and PDF draw it) rasterised, or with options.dark
  // ImPlot's drawing in the window's dark style. Saves and restores whatever ImGui/ImPlot context was current, so
  // the window may call it between its own frames.
  Image render(const Figure& figure, const ExportOptions& options);
  // ImPlot's layout of the figure, as the window draws it (the dark PNG), for tick_labels().
  void lay_out(const Figure& figure, const ExportOptions& options);
  // The axis tick labels of the last render or layout, boxed where ImPlot put their text (colourbar
  // labels aside).
  std::vector<TickLabelBox> tick_labels() const;

 private:
  Image draw(const Figure& figure, const ExportOptions& options, bool to_pixels);
  Image draw_vector(const Figure& figure, const ExportOptions& options);
  ImGuiContext* imgui_ = nullptr;
  ImPlotContext* implot_ = nullptr;
  ImFont* title_font_ = nullptr;  // bold DejaVu Sans for titles, as the vector figures set them (null: none)
};

// Writes PNG, SVG or PDF by the path's extension (.png, .svg, .pdf) through an AtomicFile (an existing file is
// replaced or refused as `existing` says); throws UsageError for other extensions, Error when the file cannot be
// written. PNG, SVG and PDF are one vector drawing (figure_vector.h) in one look: white, frameless, DejaVu Sans
// (a dark PNG is ImPlot's drawing in the window's style).
void export_figure(const Figure& figure, const std::string& path, const ExportOptions& options, Existing existing);

}  // namespace kvscope::viewers
