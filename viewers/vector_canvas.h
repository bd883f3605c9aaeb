#pragma once
// The drawing primitives a figure is made of, in figure pixels (origin top left, y down). The SVG and PDF
// writers implement them, so both files come from one drawing of the figure (figure_vector.h) and agree.
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "viewers/image.h"

namespace kvscope::viewers {

using Point = std::array<double, 2>;

struct Stroke {
  Rgba color{0, 0, 0, 255};
  double width = 1.0;
  std::vector<double> dash;  // on, off, ... in pixels; empty: solid
  Stroke() = default;
  Stroke(Rgba c, double w, std::vector<double> d = {}) : color(c), width(w), dash(std::move(d)) {}
};

struct TextStyle {
  double size = 14.0;
  double anchor = 0.0;  // 0: x is the text's start, 0.5: its middle, 1: its end
  bool bold = false;
  bool upright = false;  // rotated a quarter turn to read upwards (a y-axis label)
  Rgba color{0, 0, 0, 255};
};

class VectorCanvas {
 public:
  virtual ~VectorCanvas() = default;
  virtual void line(Point a, Point b, const Stroke& stroke) = 0;
  // One connected line through `points` (a NaN breaks it: the caller passes the pieces).
  virtual void polyline(const std::vector<Point>& points, const Stroke& stroke) = 0;
  virtual void polygon(const std::vector<Point>& points, Rgba fill, double opacity) = 0;
  virtual void rect(double x, double y, double w, double h, Rgba fill, double opacity) = 0;
  virtual void rect_outline(double x, double y, double w, double h, const Stroke& stroke) = 0;
  // No fill: an outline only.
  virtual void circle(Point centre, double radius, const Rgba* fill, const Stroke* outline) = 0;
  // `y` is the text's baseline.
  virtual void text(double x, double y, const std::string& text, const TextStyle& style) = 0;
  // A picture stretched over the rectangle, each pixel a flat cell (no smoothing between map cells).
  virtual void image(double x, double y, double w, double h, const Image& image) = 0;
  // Everything drawn until clip_end is cut to the rectangle.
  virtual void clip_begin(double x, double y, double w, double h) = 0;
  virtual void clip_end() = 0;
};

}  // namespace kvscope::viewers
