#include "viewers/drawlist_canvas.h"

#include <algorithm>
#include <cmath>

#include "viewers/font_metrics.h"

namespace kvscope::viewers {

namespace {

ImU32 color(Rgba c, double opacity = 1.0) {
  const double a = std::clamp(opacity, 0.0, 1.0) * c.a;
  return IM_COL32(c.r, c.g, c.b, static_cast<int>(std::lround(a)));
}

ImVec2 vec(Point p) { return ImVec2(static_cast<float>(p[0]), static_cast<float>(p[1])); }

}  // namespace

void add_dashed_path(ImDrawList& list, const std::vector<ImVec2>& path, ImU32 col, float width,
                     const std::vector<double>& dash) {
  if (path.size() < 2) return;
  if (dash.empty()) {
    list.AddPolyline(path.data(), static_cast<int>(path.size()), col, width, 0);
    return;
  }
  // Dashes along the path, the pattern carried over its corners as SVG and PDF carry it.
  std::size_t at_dash = 0;
  double left = dash[0];
  bool on = true;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    const ImVec2 a = path[i], b = path[i + 1];
    const double length = std::hypot(b.x - a.x, b.y - a.y);
    double at = 0;
    while (at < length) {
      const double step = std::min(left, length - at);
      if (on) {
        const float t0 = static_cast<float>(at / length), t1 = static_cast<float>((at + step) / length);
        list.AddLine(ImVec2(a.x + (b.x - a.x) * t0, a.y + (b.y - a.y) * t0),
                     ImVec2(a.x + (b.x - a.x) * t1, a.y + (b.y - a.y) * t1), col, width);
      }
      at += step;
      left -= step;
      if (left <= 1e-9) {
        at_dash = (at_dash + 1) % dash.size();
        left = std::max(0.5, dash[at_dash]);
        on = !on;
      }
    }
  }
}

DrawListCanvas::DrawListCanvas(ImDrawList& list, ImFont* regular, ImFont* bold, SoftTextureStore& textures)
    : list_(list), regular_(regular), bold_(bold ? bold : regular), textures_(textures) {
  // ImGui sizes a font by its line height (ascent minus descent), SVG and PDF by its em: the ratio of the widths the
  // layout measured with (font_metrics.h) to ImGui's sets the text in the size the other formats show it at.
  const std::string probe = "0123456789 abcdefghijklmnopqrstuvwxyz";
  const float imgui_width = regular_->CalcTextSizeA(100.0f, 1e9f, 0.0f, probe.c_str()).x;
  if (imgui_width > 0) em_scale_ = static_cast<float>(figure_font().text_width(probe, 100.0) / imgui_width);
}

void DrawListCanvas::stroke_path(const std::vector<ImVec2>& points, const Stroke& stroke, bool closed) {
  if (points.size() < 2) return;
  const ImU32 col = color(stroke.color);
  const float w = static_cast<float>(stroke.width);
  if (stroke.dash.empty()) {
    list_.AddPolyline(points.data(), static_cast<int>(points.size()), col, w, closed ? ImDrawFlags_Closed : 0);
    return;
  }
  std::vector<ImVec2> path = points;
  if (closed) path.push_back(points.front());
  add_dashed_path(list_, path, col, w, stroke.dash);
}

void DrawListCanvas::line(Point a, Point b, const Stroke& stroke) { stroke_path({vec(a), vec(b)}, stroke, false); }

void DrawListCanvas::polyline(const std::vector<Point>& points, const Stroke& stroke) {
  std::vector<ImVec2> v;
  v.reserve(points.size());
  for (const Point& p : points) v.push_back(vec(p));
  // A path that ends where it starts is a closed outline (a marker): joined there too.
  const bool closed = v.size() > 2 && v.front().x == v.back().x && v.front().y == v.back().y;
  if (closed) v.pop_back();
  stroke_path(v, stroke, closed);
}

void DrawListCanvas::polygon(const std::vector<Point>& points, Rgba fill, double opacity) {
  std::vector<ImVec2> v;
  v.reserve(points.size());
  for (const Point& p : points) v.push_back(vec(p));
  if (v.size() >= 3) list_.AddConcavePolyFilled(v.data(), static_cast<int>(v.size()), color(fill, opacity));
}

void DrawListCanvas::rect(double x, double y, double w, double h, Rgba fill, double opacity) {
  list_.AddRectFilled(vec({x, y}), vec({x + w, y + h}), color(fill, opacity));
}

void DrawListCanvas::rect_outline(double x, double y, double w, double h, const Stroke& stroke) {
  stroke_path({vec({x, y}), vec({x + w, y}), vec({x + w, y + h}), vec({x, y + h})}, stroke, true);
}

void DrawListCanvas::circle(Point centre, double radius, const Rgba* fill, const Stroke* outline) {
  if (fill) list_.AddCircleFilled(vec(centre), static_cast<float>(radius), color(*fill));
  if (outline)
    list_.AddCircle(vec(centre), static_cast<float>(radius), color(outline->color), 0, static_cast<float>(outline->width));
}

void DrawListCanvas::text(double x, double y, const std::string& text, const TextStyle& style) {
  if (text.empty()) return;
  ImFont* font = style.bold ? bold_ : regular_;
  const float size = static_cast<float>(style.size) * em_scale_;
  const float width = font->CalcTextSizeA(size, 1e9f, 0.0f, text.c_str()).x;
  const float ascent = font->GetFontBaked(size)->Ascent;
  // Laid out across with its baseline at y, then (upright) turned a quarter about (x, y) to read upwards, as SVG's
  // rotate(-90) turns it. ImGui culls glyphs outside the clip rectangle before the turn, so the text is laid out
  // under an unbounded one.
  const ImVec2 at(static_cast<float>(x - style.anchor * width), static_cast<float>(y) - ascent);
  const int first = list_.VtxBuffer.Size;
  if (style.upright) list_.PushClipRect(ImVec2(-1e6f, -1e6f), ImVec2(1e6f, 1e6f), false);
  list_.AddText(font, size, at, color(style.color), text.c_str());
  if (style.upright) {
    const float px = static_cast<float>(x), py = static_cast<float>(y);
    for (int i = first; i < list_.VtxBuffer.Size; ++i) {
      ImVec2& p = list_.VtxBuffer[i].pos;
      p = ImVec2(px + (p.y - py), py - (p.x - px));
    }
    list_.PopClipRect();
  }
}

void DrawListCanvas::image(double x, double y, double w, double h, const Image& image) {
  const std::string slot = "image" + std::to_string(images_++);
  const ImTextureID id = textures_.get(slot, slot, [&] { return image; });
  list_.AddImage(ImTextureRef(id), vec({x, y}), vec({x + w, y + h}));
}

void DrawListCanvas::clip_begin(double x, double y, double w, double h) {
  list_.PushClipRect(vec({x, y}), vec({x + w, y + h}), true);
}

void DrawListCanvas::clip_end() { list_.PopClipRect(); }

}  // namespace kvscope::viewers
