#pragma once
// VectorCanvas onto an ImGui draw list, for the software rasteriser: the PNG export of a figure is the same
// vector drawing (figure_vector.h) as its SVG and PDF, set in the same DejaVu Sans, so the three formats share
// one layout (legends, ticks, titles, colours) instead of PNG being ImPlot's on-screen look.
#include <string>
#include <vector>

#include <imgui.h>

#include "viewers/texture.h"
#include "viewers/vector_canvas.h"

namespace kvscope::viewers {

// `path` stroked in dashes of `dash` (on, off, ... in pixels; empty: one solid line), the pattern carried over its
// corners as SVG and PDF carry it. The window's dashed plot lines use it too.
void add_dashed_path(ImDrawList& list, const std::vector<ImVec2>& path, ImU32 col, float width,
                     const std::vector<double>& dash);

class DrawListCanvas final : public VectorCanvas {
 public:
  // `regular` and `bold` (null: regular) are fonts of the draw list's context; pictures go into `textures`, which
  // must outlive the rasterising of the draw list.
  DrawListCanvas(ImDrawList& list, ImFont* regular, ImFont* bold, SoftTextureStore& textures);
  void line(Point a, Point b, const Stroke& stroke) override;
  void polyline(const std::vector<Point>& points, const Stroke& stroke) override;
  void polygon(const std::vector<Point>& points, Rgba fill, double opacity) override;
  void rect(double x, double y, double w, double h, Rgba fill, double opacity) override;
  void rect_outline(double x, double y, double w, double h, const Stroke& stroke) override;
  void circle(Point centre, double radius, const Rgba* fill, const Stroke* outline) override;
  void text(double x, double y, const std::string& text, const TextStyle& style) override;
  void image(double x, double y, double w, double h, const Image& image) override;
  void clip_begin(double x, double y, double w, double h) override;
  void clip_end() override;

 private:
  void stroke_path(const std::vector<ImVec2>& points, const Stroke& stroke, bool closed);
  ImDrawList& list_;
  ImFont* regular_;
  ImFont* bold_;
  SoftTextureStore& textures_;
  int images_ = 0;
  float em_scale_ = 1.0f;  // ImGui's font size for a text size in ems
};

}  // namespace kvscope::viewers
