#pragma once
// Figures to files without a display: an ImGui + ImPlot context of its own (no window, no OpenGL) lays
// the figure out, and the software rasteriser turns its draw lists into pixels. The window's export
// menu and `kvscope figure` both come through here, so they produce the same pictures.
#include <memory>
#include <string>
#include <vector>

#include "viewers/figure.h"
#include "viewers/image.h"

struct ImGuiContext;
struct ImPlotContext;

namespace kvscope::viewers {

struct ExportOptions {
  int width = 1200, height = 800;
  float font_px = 0.0f;   // 0: scaled with the figure (height / 50, at least 13)
  bool dark = false;      // the window's dark style; off gives white paper for print
};

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

  // Renders on the calling thread. Saves and restores whatever ImGui/ImPlot context was current, so
  // the window may call it between its own frames.
  Image render(const Figure& figure, const ExportOptions& options);
  // Everything render does but the rasterising: the layout, for tick_labels().
  void lay_out(const Figure& figure, const ExportOptions& options);
  // The axis tick labels of the last render or layout, boxed where ImPlot put their text (colourbar
  // labels aside).
  std::vector<TickLabelBox> tick_labels() const;

 private:
  Image draw(const Figure& figure, const ExportOptions& options, bool to_pixels);
  ImGuiContext* imgui_ = nullptr;
  ImPlotContext* implot_ = nullptr;
};

// Writes PNG or SVG by the path's extension (.png, .svg) through an AtomicFile (an existing file is replaced
// or refused as `existing` says); throws Error for other extensions, for SVG of heatmaps, or when the file
// cannot be written.
void export_figure(const Figure& figure, const std::string& path, const ExportOptions& options, Existing existing);

}  // namespace kvscope::viewers
