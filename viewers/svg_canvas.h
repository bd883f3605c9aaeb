#pragma once
// VectorCanvas as an SVG document; maps go in as embedded PNG pictures.
#include <sstream>

#include "viewers/vector_canvas.h"

namespace kvscope::viewers {

class SvgCanvas final : public VectorCanvas {
 public:
  SvgCanvas(double width, double height);
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
  // The document, closed.
  std::string finish();

 private:
  std::ostringstream out_;
  int clips_ = 0;
};

}  // namespace kvscope::viewers
