#include "viewers/svg_canvas.h"

#include <cstdio>

namespace kvscope::viewers {

namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string hex(Rgba c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

std::string stroke_attributes(const Stroke& s) {
  std::string a = " stroke=\"" + hex(s.color) + "\" stroke-width=\"" + num(s.width) + "\"";
  if (!s.dash.empty()) {
    a += " stroke-dasharray=\"";
    for (std::size_t i = 0; i < s.dash.size(); ++i) a += (i ? "," : "") + num(s.dash[i]);
    a += "\"";
  }
  return a;
}

std::string base64(const std::string& bytes) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16 | static_cast<unsigned char>(bytes[i + 1]) << 8 |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += {table[v >> 18 & 63], table[v >> 12 & 63], table[v >> 6 & 63], table[v & 63]};
  }
  if (i + 1 == bytes.size()) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    out += {table[v >> 18 & 63], table[v >> 12 & 63], '=', '='};
  } else if (i + 2 == bytes.size()) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16 | static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += {table[v >> 18 & 63], table[v >> 12 & 63], table[v >> 6 & 63], '='};
  }
  return out;
}

}  // namespace

SvgCanvas::SvgCanvas(double width, double height) {
  out_ << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width)
       << "\" height=\"" << num(height) << "\" viewBox=\"0 0 " << num(width) << " " << num(height) << "\">\n";
  out_ << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out_ << "<g font-family=\"DejaVu Sans, Arial, sans-serif\">\n";
}

void SvgCanvas::line(Point a, Point b, const Stroke& s) {
  out_ << "<line x1=\"" << num(a[0]) << "\" y1=\"" << num(a[1]) << "\" x2=\"" << num(b[0]) << "\" y2=\"" << num(b[1])
       << "\"" << stroke_attributes(s) << "/>\n";
}

void SvgCanvas::polyline(const std::vector<Point>& points, const Stroke& s) {
  if (points.empty()) return;
  out_ << "<path d=\"";
  for (std::size_t i = 0; i < points.size(); ++i) out_ << (i ? "L" : "M") << num(points[i][0]) << "," << num(points[i][1]) << " ";
  out_ << "\" fill=\"none\"" << stroke_attributes(s) << " stroke-linejoin=\"round\"/>\n";
}

void SvgCanvas::polygon(const std::vector<Point>& points, Rgba fill, double opacity) {
  out_ << "<polygon fill=\"" << hex(fill) << "\" fill-opacity=\"" << num(opacity) << "\" stroke=\"none\" points=\"";
  for (const Point& p : points) out_ << num(p[0]) << "," << num(p[1]) << " ";
  out_ << "\"/>\n";
}

void SvgCanvas::rect(double x, double y, double w, double h, Rgba fill, double opacity) {
  out_ << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w) << "\" height=\"" << num(h)
       << "\" fill=\"" << hex(fill) << "\"";
  if (opacity < 1.0) out_ << " fill-opacity=\"" << num(opacity) << "\"";
  out_ << "/>\n";
}

void SvgCanvas::rect_outline(double x, double y, double w, double h, const Stroke& s) {
  out_ << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w) << "\" height=\"" << num(h)
       << "\" fill=\"none\"" << stroke_attributes(s) << "/>\n";
}

void SvgCanvas::circle(Point c, double r, const Rgba* fill, const Stroke* outline) {
  out_ << "<circle cx=\"" << num(c[0]) << "\" cy=\"" << num(c[1]) << "\" r=\"" << num(r) << "\" fill=\""
       << (fill ? hex(*fill) : "none") << "\"" << (outline ? stroke_attributes(*outline) : std::string()) << "/>\n";
}

void SvgCanvas::text(double x, double y, const std::string& text, const TextStyle& st) {
  const char* anchor = st.anchor >= 0.75 ? "end" : st.anchor >= 0.25 ? "middle" : "start";
  out_ << "<text";
  if (st.upright) out_ << " transform=\"translate(" << num(x) << "," << num(y) << ") rotate(-90)\"";
  else out_ << " x=\"" << num(x) << "\" y=\"" << num(y) << "\"";
  out_ << " font-size=\"" << num(st.size) << "\" text-anchor=\"" << anchor << "\"";
  if (st.bold) out_ << " font-weight=\"bold\"";
  if (!(st.color == Rgba{0, 0, 0, 255})) out_ << " fill=\"" << hex(st.color) << "\"";
  out_ << ">" << xml_escape(text) << "</text>\n";
}

void SvgCanvas::image(double x, double y, double w, double h, const Image& image) {
  out_ << "<image x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w) << "\" height=\"" << num(h)
       << "\" preserveAspectRatio=\"none\" style=\"image-rendering:pixelated;image-rendering:crisp-edges\" "
          "href=\"data:image/png;base64,"
       << base64(encode_png(image)) << "\"/>\n";
}

void SvgCanvas::clip_begin(double x, double y, double w, double h) {
  const std::string id = "clip" + std::to_string(clips_++);
  out_ << "<clipPath id=\"" << id << "\"><rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w)
       << "\" height=\"" << num(h) << "\"/></clipPath>\n<g clip-path=\"url(#" << id << ")\">\n";
}

void SvgCanvas::clip_end() { out_ << "</g>\n"; }

std::string SvgCanvas::finish() {
  out_ << "</g>\n</svg>\n";
  return out_.str();
}

}  // namespace kvscope::viewers
