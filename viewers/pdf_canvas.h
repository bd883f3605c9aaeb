#pragma once
// VectorCanvas as a one-page PDF: the vector format journals take. Text is set in DejaVu Sans, embedded
// (Helvetica, which every reader has, when the font file is missing); maps are embedded pictures drawn
// cell by cell without smoothing; streams are deflated.
#include <map>
#include <sstream>
#include <vector>

#include "viewers/vector_canvas.h"

namespace kvscope::viewers {

class PdfCanvas final : public VectorCanvas {
 public:
  // The page is `width` x `height` figure pixels at `dpi` pixels per inch (a 990-pixel-wide figure at 300 dpi
  // is 3.3 inches).
  PdfCanvas(double width, double height, double dpi);
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
  // The file's bytes.
  std::string finish();

 private:
  void set_stroke(const Stroke& s);
  void set_fill(Rgba c, double opacity);
  double width_, height_, dpi_;
  std::ostringstream content_;
  std::vector<Image> images_;
  std::map<int, std::string> opacities_;  // opacity in thousandths -> graphics state name
  bool used_bold_ = false;
};

}  // namespace kvscope::viewers
