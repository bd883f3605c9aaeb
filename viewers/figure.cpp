#include "viewers/figure.h"

#include <implot.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/common/error.h"
#include "viewers/axis_ticks.h"
#include "viewers/plot_fit.h"
#include "viewers/plot_readout.h"

namespace kvscope::viewers {

namespace {

ImVec4 to_vec4(Rgba c, float alpha = 1.0f) { return ImVec4(c.r / 255.0f, c.g / 255.0f, c.b / 255.0f, alpha * c.a / 255.0f); }

// FNV-1a over the plotted numbers: cheap enough per frame for a few thousand points, and tells a
// panel that its data changed so the axes refit once instead of staying where the user left them.
struct Hasher {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  template <typename T>
  void vec(const std::vector<T>& v) {
    bytes(v.data(), v.size() * sizeof(T));
  }
};

// True once per change of `hash` for the plot `id` in the current window, kept in ImGui's state storage.
bool changed_since_last_frame(const char* id, uint64_t hash) {
  ImGuiStorage* storage = ImGui::GetStateStorage();
  const ImGuiID key = ImGui::GetID(id) ^ 0x5eedu;
  const int folded = static_cast<int>(hash ^ (hash >> 32));
  const bool changed = storage->GetInt(key, folded ^ 1) != folded;
  storage->SetInt(key, folded);
  return changed;
}

// A y-axis label longer than the plot is tall runs over whatever is above the plot: drop its parenthesised
// explanation ("step (prefill blocks, then decode)" -> "step") when the plot is that short. The plot area is the
// plot's height less its title and x axis, about three and a half lines.
std::string y_label_fitting(const std::string& label, float plot_height) {
  const float room = plot_height - 3.5f * ImGui::GetFontSize();
  const std::size_t paren = label.find(" (");
  // A height of 0 or less is ImPlot's default size, not a short plot.
  if (paren == std::string::npos || plot_height <= 0 || ImGui::CalcTextSize(label.c_str()).x <= room) return label;
  return label.substr(0, paren);
}

Image colorize_plot(const HeatmapPlot& p) {
  const trace::Map2D& m = p.map;
  if (p.categories.empty())
    return p.no_attention_label.empty() ? colorize(m.values.data(), m.rows, m.cols, p.scale, p.cmap)
                                        : colorize(m.values.data(), m.rows, m.cols, p.scale, p.cmap, kNoAttentionColor);
  Image img(m.cols, m.rows);
  for (int r = 0; r < m.rows; ++r)
    for (int c = 0; c < m.cols; ++c) {
      const float v = m.at(r, c);
      const int k = std::isnan(v) ? -1 : static_cast<int>(v);
      img.set(c, r, k >= 0 && k < static_cast<int>(p.categories.size()) ? p.categories[k].color : Rgba{0, 0, 0, 255});
    }
  return img;
}

// A fitted line or bar plot keeps this share of its data's span free at each end, as the SVG writer does.
constexpr double kLinePlotMargin = 0.05;

constexpr Rgba kEvictedColor{214, 39, 40, 255};
constexpr Rgba kMergedColor{255, 160, 20, 255};

}  // namespace

Rgba series_color(int index) {
  static const Rgba deep[] = {{76, 114, 176, 255}, {221, 132, 82, 255}, {85, 168, 104, 255}, {196, 78, 82, 255},
                              {129, 114, 179, 255}, {147, 120, 96, 255}, {218, 139, 195, 255}, {140, 140, 140, 255},
                              {204, 185, 116, 255}, {100, 181, 205, 255}};
  const int n = static_cast<int>(std::size(deep));
  return deep[((index % n) + n) % n];
}

bool Figure::svg_capable() const {
  if (parts.empty()) return false;
  for (const auto& p : parts)
    if (!std::holds_alternative<LinePlot>(p)) return false;
  return true;
}

int implot_colormap(Colormap cmap) {
  const std::string name = std::string("kv_") + colormap_name(cmap);
  int index = ImPlot::GetColormapIndex(name.c_str());
  if (index >= 0) return index;
  std::vector<ImU32> cols;
  for (const Rgba& c : colormap_stops(cmap)) cols.push_back(IM_COL32(c.r, c.g, c.b, c.a));
  return ImPlot::AddColormap(name.c_str(), cols.data(), static_cast<int>(cols.size()), false);
}

void draw_line_plot(const char* id, const LinePlot& plot, ImVec2 size, const PlotHook& hook) {
  Hasher h;
  for (const auto& s : plot.series) {
    h.str(s.name);
    h.vec(s.x);
    h.vec(s.y);
  }
  h.bytes(&plot.log_y, sizeof plot.log_y);
  const bool refit = changed_since_last_frame(id, h.h);
  const std::string title = plot.title + "##" + id;
  if (refit) ImPlot::SetNextAxesToFit();
  if (!ImPlot::BeginPlot(title.c_str(), size)) return;
  const std::string y_label = y_label_fitting(plot.y_label, size.y);
  ImPlot::SetupAxes(plot.x_label.empty() ? nullptr : plot.x_label.c_str(), y_label.empty() ? nullptr : y_label.c_str());
  if (plot.log_y) ImPlot::SetupAxisScale(ImAxis_Y1, ImPlotScale_Log10);
  if (plot.x_tick_labels.empty()) {
    if (plot.integer_x) use_integer_ticks(ImAxis_X1);
    else use_spaced_ticks(ImAxis_X1);
  } else {
    // One slot per category, so each name has its slot's width to sit in, the outer ones included.
    ImPlot::SetupAxisLimits(ImAxis_X1, -0.5, plot.x_tick_labels.size() - 0.5, ImPlotCond_Always);
    use_category_ticks(ImAxis_X1, plot.x_tick_labels);
  }
  if (plot.y_limits) ImPlot::SetupAxisLimits(ImAxis_Y1, (*plot.y_limits)[0], (*plot.y_limits)[1], ImPlotCond_Always);
  use_spaced_ticks(ImAxis_Y1);
  ImPlot::SetupLegend(ImPlotLocation_NorthEast, plot.legend_outside ? ImPlotLegendFlags_Outside : 0);
  // A series equal to an earlier one is drawn exactly over it: the legend names what it coincides with, and it
  // is drawn with hollow square markers so both stay visible.
  const std::vector<std::string> identical = identical_to(plot);
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < plot.series.size(); ++i) labels.push_back(legend_name(plot, i, identical));
  for (std::size_t i = 0; i < plot.series.size(); ++i) {
    const LineSeries& s = plot.series[i];
    const int n = static_cast<int>(std::min(s.x.size(), s.y.size()));
    if (n == 0) continue;
    const Rgba col = series_color(s.color >= 0 ? s.color : static_cast<int>(i));
    ImPlotSpec spec;
    spec.LineColor = to_vec4(col);
    spec.FillColor = to_vec4(col);
    spec.LineWeight = std::max(1.5f, ImGui::GetFontSize() / 8.0f);  // thicker lines in large exported figures
    const char* label = labels[i].c_str();
    if (s.y_low.size() == s.x.size() && s.y_high.size() == s.x.size()) {
      ImPlotSpec band = spec;
      band.FillAlpha = 0.25f;
      ImPlot::PlotShaded(label, s.x.data(), s.y_low.data(), s.y_high.data(), n, band);
    }
    switch (s.kind) {
      case LineSeries::Kind::Line:
        if (n <= 64 || !identical[i].empty()) {
          spec.Marker = identical[i].empty() ? ImPlotMarker_Circle : ImPlotMarker_Square;
          spec.MarkerSize = identical[i].empty() ? 2.5f : 4.5f;
          if (!identical[i].empty()) spec.MarkerFillColor = ImVec4(0, 0, 0, 0);
        }
        ImPlot::PlotLine(label, s.x.data(), s.y.data(), n, spec);
        break;
      case LineSeries::Kind::Bars:
        spec.FillAlpha = 0.85f;
        ImPlot::PlotBars(label, s.x.data(), s.y.data(), n, s.bar_width, spec);
        break;
      case LineSeries::Kind::Stairs: ImPlot::PlotStairs(label, s.x.data(), s.y.data(), n, spec); break;
      case LineSeries::Kind::Markers:
        spec.Marker = ImPlotMarker_Circle;
        ImPlot::PlotScatter(label, s.x.data(), s.y.data(), n, spec);
        break;
    }
  }
  if (!plot.marks_x.empty()) {
    ImPlotSpec spec;
    spec.LineColor = ImVec4(0.6f, 0.6f, 0.6f, 0.8f);
    spec.Flags = ImPlotItemFlags_NoLegend;
    ImPlot::PlotInfLines("##marks", plot.marks_x.data(), static_cast<int>(plot.marks_x.size()), spec);
  }
  // The read-out under the pointer; a panel's hook may replace it with a richer one (it runs after).
  if (ImPlot::IsPlotHovered()) {
    const ImPlotPoint m = ImPlot::GetPlotMousePos();
    const ImPlotRect r = ImPlot::GetPlotLimits();
    const ImVec2 px = ImPlot::GetPlotSize();
    const double uy = plot.log_y ? 0.0 : r.Y.Size() / std::max(1.0f, px.y);
    if (uy > 0)
      if (const auto hit = readout_at(plot, m.x, m.y, r.X.Size() / std::max(1.0f, px.x), uy))
        ImGui::SetTooltip("%s", hit->text.c_str());
  }
  if (hook) hook();
  pad_fitted_axes(kLinePlotMargin);
  ImPlot::EndPlot();
}

void plot_map_image(const char* id, ImTextureID texture, double x0, double y0, double x1, double y1) {
  // The OpenGL backend binds a linear sampler for every draw (it overrides the texture's own GL_NEAREST), which
  // blurred neighbouring cells into each other when zoomed in: ask for nearest sampling around the map and
  // linear again after it (the font atlas wants it). Offscreen export has no backend callbacks and samples
  // nearest by itself (soft_render.cpp).
  const ImGuiPlatformIO& io = ImGui::GetPlatformIO();
  ImDrawList* dl = ImPlot::GetPlotDrawList();
  if (io.DrawCallback_SetSamplerNearest) dl->AddCallback(io.DrawCallback_SetSamplerNearest, nullptr);
  // The axis is inverted (row 0 on top) while PlotImage assumes y up, so the v coordinates flip.
  ImPlot::PlotImage(id, ImTextureRef(texture), ImPlotPoint(x0, y0), ImPlotPoint(x1, y1), ImVec2(0, 1), ImVec2(1, 0));
  if (io.DrawCallback_SetSamplerLinear) dl->AddCallback(io.DrawCallback_SetSamplerLinear, nullptr);
}

KeyStripPixels key_strip_pixels(float below_map, float strip_end, float area_top, float area_bottom, float font) {
  // As tall as the strip's own space below the map, within 0.5 to 1 em: a fixed size on screen at any zoom.
  const float h = std::clamp(0.85f * (strip_end - below_map), 0.5f * font, font);
  KeyStripPixels p;
  p.top = below_map + 0.15f * h;
  if (p.top + h > area_bottom) {
    // The map's bottom edge is below the plot area (zoomed in on earlier rows): the strip keeps to the bottom of
    // what is visible, over the map, so the keys' fate is on screen at any zoom.
    p.top = std::max(area_top, area_bottom - h);
    p.pinned = true;
  }
  p.bottom = p.top + h;
  return p;
}

void draw_heatmap(const char* id, const HeatmapPlot& plot, ImVec2 size, TextureStore& textures, const PlotHook& hook) {
  const trace::Map2D& m = plot.map;
  const float font = ImGui::GetFontSize();
  const bool legend = !plot.categories.empty();
  const float bar_w = legend ? 0.0f : std::round(font * 5.5f);
  const ImVec2 plot_size(std::max(50.0f, size.x - bar_w), size.y);
  const std::string signature = plot.signature + "|" + colormap_name(plot.cmap) + "|" +
                                std::to_string(static_cast<int>(plot.scale.kind)) + "|" + std::to_string(plot.scale.vmin) +
                                "|" + std::to_string(plot.scale.vmax);
  const ImTextureID tex = textures.get(id, signature, [&] { return colorize_plot(plot); });
  // Refit when the map's extent changes (another prompt, the decode rows, the strip on or off), not when its
  // contents do: a budget change, another policy, layer or head over the same tokens keeps the user's zoom.
  const bool marks = !plot.column_marks.empty();
  Hasher h;
  for (const double v : {static_cast<double>(m.source_rows), static_cast<double>(m.source_cols), plot.x_origin,
                         plot.y_origin, marks ? 1.0 : 0.0})
    h.bytes(&v, sizeof v);
  const bool refit = changed_since_last_frame(id, h.h);
  const double strip = marks ? std::max(1.0, 0.035 * m.source_rows) : 0.0;
  const std::string title = plot.title + "##" + id;
  // The map covers its plot area: a plot background under it would be painted for nothing (software OpenGL
  // pays per pixel painted). Only the key-mark strip below the map shows through, now in the frame's colour.
  ImPlot::PushStyleColor(ImPlotCol_PlotBg, ImVec4(0, 0, 0, 0));
  const bool open = ImPlot::BeginPlot(title.c_str(), plot_size,
                                      legend || (plot.mark_legend && (marks || !plot.no_attention_label.empty())) ? 0 : ImPlotFlags_NoLegend);
  if (!open) ImPlot::PopStyleColor();
  if (open) {
    ImPlot::SetupAxis(ImAxis_X1, plot.x_label.empty() ? nullptr : plot.x_label.c_str());
    const std::string y_label = y_label_fitting(plot.y_label, size.y);
    ImPlot::SetupAxis(ImAxis_Y1, y_label.empty() ? nullptr : y_label.c_str(), ImPlotAxisFlags_Invert);
    // Map axes count positions and steps: whole numbers.
    if (plot.x_tokens.empty()) use_integer_ticks(ImAxis_X1);
    else use_token_ticks(ImAxis_X1, plot.x_tokens);
    if (plot.y_tokens.empty()) use_integer_ticks(ImAxis_Y1);
    else use_token_ticks(ImAxis_Y1, plot.y_tokens);
    const double x0 = plot.x_origin, y0 = plot.y_origin;
    ImPlot::SetupAxesLimits(x0, x0 + std::max(1, m.source_cols), y0, y0 + std::max(1.0, m.source_rows + strip),
                            refit ? ImPlotCond_Always : ImPlotCond_Once);
    if (plot.view) ImPlot::SetupAxesLimits((*plot.view)[0], (*plot.view)[1], (*plot.view)[2], (*plot.view)[3], ImPlotCond_Always);
    // Category legends sit outside (they describe every cell); the key-mark legend fits in the empty
    // upper-right triangle of a causal map and so costs no width in narrow compare columns.
    ImPlot::SetupLegend(ImPlotLocation_NorthEast, legend ? ImPlotLegendFlags_Outside : 0);
    ImPlot::SetupFinish();  // the plot background is painted here, with the colour pushed above
    ImPlot::PopStyleColor();
    if (!plot.x_tokens.empty()) draw_rotated_token_labels(ImAxis_X1, plot.x_tokens);
    if (tex != ImTextureID_Invalid)
      plot_map_image("##map", tex, x0, y0, x0 + static_cast<double>(m.cols) * m.col_block,
                     y0 + static_cast<double>(m.rows) * m.row_block);
    for (const auto& c : plot.categories) {
      ImPlotSpec spec;
      spec.LineColor = to_vec4(c.color);
      spec.FillColor = to_vec4(c.color);
      ImPlot::PlotDummy(c.name.c_str(), spec);
    }
    if (marks) {
      // The strip is drawn on the draw list, not as an item: a fit (double-click) must reach it all the same. It is
      // drawn after the hook, over the exact region a zoom rebuilds (which would cover a strip pinned over the map).
      fit_y_to_include(y0 + m.source_rows + strip);
      if (plot.mark_legend) {
        ImPlotSpec ev, mg;
        ev.LineColor = ev.FillColor = to_vec4(kEvictedColor);
        mg.LineColor = mg.FillColor = to_vec4(kMergedColor);
        ImPlot::PlotDummy("evicted key", ev);
        ImPlot::PlotDummy("merged key", mg);
      }
    }
    if (!plot.marks_x.empty()) {
      ImPlotSpec spec;
      spec.LineColor = ImVec4(1.0f, 0.35f, 0.3f, 1.0f);
      spec.LineWeight = 2.0f;
      spec.Flags = ImPlotItemFlags_NoLegend;
      ImPlot::PlotInfLines("##marks", plot.marks_x.data(), static_cast<int>(plot.marks_x.size()), spec);
    }
    if (plot.mark_legend && !plot.no_attention_label.empty()) {
      ImPlotSpec none;
      none.LineColor = none.FillColor = to_vec4(kNoAttentionColor);
      ImPlot::PlotDummy(plot.no_attention_label.c_str(), none);
    }
    if (hook) hook();
    // The key-mark strip, over everything the hook drew (a zoom's exact region).
    std::optional<KeyStripPixels> key_strip;
    if (marks) {
      ImDrawList* dl = ImPlot::GetPlotDrawList();
      ImPlot::PushPlotClipRect();
      const float area_top = ImPlot::GetPlotPos().y, area_bottom = area_top + ImPlot::GetPlotSize().y;
      key_strip = key_strip_pixels(ImPlot::PlotToPixels(x0, y0 + m.source_rows).y,
                                   ImPlot::PlotToPixels(x0, y0 + m.source_rows + strip).y, area_top, area_bottom, font);
      if (key_strip->pinned)  // over the map: a dark edge sets it apart from the cells under it
        dl->AddRectFilled(ImVec2(ImPlot::GetPlotPos().x, key_strip->top - 1.0f),
                          ImVec2(ImPlot::GetPlotPos().x + ImPlot::GetPlotSize().x, key_strip->bottom + 1.0f),
                          IM_COL32(20, 20, 24, 255));
      for (int c = 0; c < static_cast<int>(plot.column_marks.size()); ++c) {
        if (!plot.column_marks[c]) continue;
        const Rgba col = plot.column_marks[c] == 3 ? kNotYetColor : plot.column_marks[c] == 2 ? kMergedColor : kEvictedColor;
        const float a = ImPlot::PlotToPixels(x0 + c, y0).x, b = ImPlot::PlotToPixels(x0 + c + 1, y0).x;
        // At least a pixel wide, so single evicted keys stay visible when zoomed out.
        dl->AddRectFilled(ImVec2(std::min(a, b), key_strip->top),
                          ImVec2(std::max({a, b, std::min(a, b) + 1.0f}), key_strip->bottom),
                          IM_COL32(col.r, col.g, col.b, 255));
      }
      ImPlot::PopPlotClipRect();
    }
    // Over the strip, its read-out replaces the cell's (the strip may lie over the map's cells).
    if (key_strip && ImPlot::IsPlotHovered()) {
      const ImVec2 mouse = ImGui::GetIO().MousePos;
      const int c = static_cast<int>(std::floor(ImPlot::GetPlotMousePos().x - x0));
      if (mouse.y >= key_strip->top && mouse.y <= key_strip->bottom && c >= 0 &&
          c < static_cast<int>(plot.column_marks.size())) {
        static const char* const fate[4] = {"in the cache", "evicted", "merged into another key", "not yet in the cache"};
        const std::string token = static_cast<std::size_t>(x0) + c < plot.x_tokens.size()
                                      ? " '" + plot.x_tokens[static_cast<std::size_t>(x0) + c] + "'"
                                      : "";
        ImGui::SetTooltip("key %d%s: %s at the selected step\n(strip: red evicted, orange merged, dark grey not yet seen)",
                          static_cast<int>(x0) + c, token.c_str(), fate[plot.column_marks[c] & 3]);
      }
    }
    ImPlot::EndPlot();
  }
  if (!legend) {
    ImGui::SameLine(0, 0);
    const std::string label = plot.colorbar_label + "##cb" + id;
    ImPlot::ColormapScale(label.c_str(), plot.scale.axis_min(), plot.scale.axis_max(), ImVec2(bar_w, size.y), "%.3g",
                          0, implot_colormap(plot.cmap));
  }
}

void draw_figure(const Figure& figure, ImVec2 size, TextureStore& textures) {
  const int n = static_cast<int>(figure.parts.size());
  if (n == 0) return;
  const float gap = ImGui::GetStyle().ItemSpacing.x;
  const float w = (size.x - gap * (n - 1)) / n;
  for (int i = 0; i < n; ++i) {
    if (i) ImGui::SameLine();
    const std::string id = "part" + std::to_string(i);
    ImGui::BeginGroup();
    if (const auto* lp = std::get_if<LinePlot>(&figure.parts[i])) draw_line_plot(id.c_str(), *lp, ImVec2(w, size.y));
    else draw_heatmap(id.c_str(), std::get<HeatmapPlot>(figure.parts[i]), ImVec2(w, size.y), textures);
    ImGui::EndGroup();
  }
}

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

std::string hex_color(Rgba c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void line_plot_svg(std::ostringstream& out, const LinePlot& plot, double ox, double width, double height, float font) {
  const double left = ox + font * 5.0, right = ox + width - font * 1.2, top = font * 2.6, bottom = height - font * 3.6;
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  bool bars = false;
  for (const auto& s : plot.series) {
    const double half = s.kind == LineSeries::Kind::Bars ? s.bar_width / 2 : 0.0;
    bars |= s.kind == LineSeries::Kind::Bars;
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i]) || (plot.log_y && s.y[i] <= 0)) continue;
      x_lo = std::min(x_lo, s.x[i] - half), x_hi = std::max(x_hi, s.x[i] + half);
      y_lo = std::min(y_lo, s.y[i]), y_hi = std::max(y_hi, s.y[i]);
      if (i < s.y_low.size() && std::isfinite(s.y_low[i])) y_lo = std::min(y_lo, s.y_low[i]);
      if (i < s.y_high.size() && std::isfinite(s.y_high[i])) y_hi = std::max(y_hi, s.y_high[i]);
    }
  }
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  if (bars && !plot.log_y) y_lo = std::min(y_lo, 0.0), y_hi = std::max(y_hi, 0.0);
  if (plot.y_limits) y_lo = (*plot.y_limits)[0], y_hi = (*plot.y_limits)[1];
  if (x_hi <= x_lo) x_hi = x_lo + 1;
  if (y_hi <= y_lo) y_hi = y_lo + 1;
  auto ty = [&](double v) { return plot.log_y ? std::log10(std::max(v, 1e-300)) : v; };
  double a = ty(y_lo), b = ty(y_hi);
  const double pad = kLinePlotMargin * (b - a);
  a -= pad, b += pad;
  const double xpad = kLinePlotMargin * (x_hi - x_lo);
  // Categories get one slot each, as in draw_line_plot.
  const double xa = plot.x_tick_labels.empty() ? x_lo - xpad : -0.5;
  const double xb = plot.x_tick_labels.empty() ? x_hi + xpad : plot.x_tick_labels.size() - 0.5;
  auto px = [&](double x) { return left + (x - xa) / (xb - xa) * (right - left); };
  auto py = [&](double y) { return bottom - (ty(y) - a) / (b - a) * (bottom - top); };

  out << "<g font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"" << num(font) << "\">\n";
  out << "<text x=\"" << num((left + right) / 2) << "\" y=\"" << num(font * 1.6) << "\" text-anchor=\"middle\" font-weight=\"bold\">"
      << xml_escape(plot.title) << "</text>\n";
  // Grid and ticks, spaced by their labels. The viewer picks the font; DejaVu Sans (named first) sets
  // digits 0.64 em wide, so that is the width assumed per character.
  const LabelExtent across = [font](const std::string& s) { return 0.64f * font * static_cast<float>(s.size()); };
  const LabelExtent up = [font](const std::string&) { return 1.2f * font; };
  const double inf = std::numeric_limits<double>::infinity();  // y labels may overhang: nothing is beside them
  const std::vector<AxisTick> yt =
      plot.log_y ? spaced_log_ticks(std::pow(10.0, a), std::pow(10.0, b), bottom - top, kLabelGapUpEm * font, inf,
                                    tick_text, up)
                 : spaced_linear_ticks(a, b, bottom - top, kLabelGapUpEm * font, inf, tick_text, up);
  for (const AxisTick& t : yt) {
    if (!t.major) continue;
    out << "<line x1=\"" << num(left) << "\" x2=\"" << num(right) << "\" y1=\"" << num(py(t.value)) << "\" y2=\""
        << num(py(t.value)) << "\" stroke=\"#e0e0e0\"/>\n";
    out << "<text x=\"" << num(left - font * 0.4) << "\" y=\"" << num(py(t.value) + font * 0.35)
        << "\" text-anchor=\"end\">" << xml_escape(t.label) << "</text>\n";
  }
  const std::vector<AxisTick> xt =
      plot.x_tick_labels.empty()
          ? spaced_linear_ticks(xa, xb, right - left, kLabelGapAcrossEm * font, 0.4 * font, tick_text, across)
          : spaced_category_ticks(xa, xb, right - left, kLabelGapAcrossEm * font, 0.4 * font, plot.x_tick_labels,
                                  across);
  for (const AxisTick& t : xt) {
    if (!t.major) continue;
    out << "<line x1=\"" << num(px(t.value)) << "\" x2=\"" << num(px(t.value)) << "\" y1=\"" << num(top) << "\" y2=\""
        << num(bottom) << "\" stroke=\"#eeeeee\"/>\n";
    out << "<text x=\"" << num(px(t.value)) << "\" y=\"" << num(bottom + font * 1.3) << "\" text-anchor=\"middle\">"
        << xml_escape(t.label) << "</text>\n";
  }
  const std::vector<std::string> identical = identical_to(plot);
  // Data, clipped to the plot area.
  const std::string clip = "clip" + std::to_string(static_cast<long>(ox));
  out << "<clipPath id=\"" << clip << "\"><rect x=\"" << num(left) << "\" y=\"" << num(top) << "\" width=\"" << num(right - left)
      << "\" height=\"" << num(bottom - top) << "\"/></clipPath>\n<g clip-path=\"url(#" << clip << ")\">\n";
  for (std::size_t si = 0; si < plot.series.size(); ++si) {
    const LineSeries& s = plot.series[si];
    const std::string col = hex_color(series_color(s.color >= 0 ? s.color : static_cast<int>(si)));
    const std::size_t n = std::min(s.x.size(), s.y.size());
    if (s.y_low.size() == s.x.size() && s.y_high.size() == s.x.size() && n > 0) {
      out << "<polygon fill=\"" << col << "\" fill-opacity=\"0.25\" stroke=\"none\" points=\"";
      for (std::size_t i = 0; i < n; ++i) out << num(px(s.x[i])) << "," << num(py(s.y_high[i])) << " ";
      for (std::size_t i = n; i-- > 0;) out << num(px(s.x[i])) << "," << num(py(s.y_low[i])) << " ";
      out << "\"/>\n";
    }
    if (s.kind == LineSeries::Kind::Bars) {
      const double base = plot.log_y ? std::pow(10.0, a) : 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        if (!std::isfinite(s.y[i])) continue;
        const double x0 = px(s.x[i] - s.bar_width / 2), x1 = px(s.x[i] + s.bar_width / 2);
        const double y0 = py(std::max(s.y[i], base)), y1 = py(base);
        out << "<rect x=\"" << num(x0) << "\" y=\"" << num(std::min(y0, y1)) << "\" width=\"" << num(x1 - x0)
            << "\" height=\"" << num(std::fabs(y1 - y0)) << "\" fill=\"" << col << "\" fill-opacity=\"0.85\"/>\n";
      }
    } else if (s.kind == LineSeries::Kind::Markers) {
      for (std::size_t i = 0; i < n; ++i)
        if (std::isfinite(s.y[i]))
          out << "<circle cx=\"" << num(px(s.x[i])) << "\" cy=\"" << num(py(s.y[i])) << "\" r=\"3\" fill=\"" << col << "\"/>\n";
    } else {
      // NaN breaks the line, as in ImPlot.
      std::string path;
      bool pen = false;
      for (std::size_t i = 0; i < n; ++i) {
        if (!std::isfinite(s.y[i]) || (plot.log_y && s.y[i] <= 0)) {
          pen = false;
          continue;
        }
        if (s.kind == LineSeries::Kind::Stairs && pen) path += "H" + num(px(s.x[i])) + " ";
        path += (pen ? "L" : "M") + num(px(s.x[i])) + "," + num(py(s.y[i])) + " ";
        pen = true;
      }
      out << "<path d=\"" << path << "\" fill=\"none\" stroke=\"" << col << "\" stroke-width=\"2\"/>\n";
      // As in the window: a series drawn exactly over an earlier one shows hollow squares at its points.
      if (!identical[si].empty())
        for (std::size_t i = 0; i < n; ++i)
          if (std::isfinite(s.y[i]) && !(plot.log_y && s.y[i] <= 0))
            out << "<rect x=\"" << num(px(s.x[i]) - 4) << "\" y=\"" << num(py(s.y[i]) - 4)
                << "\" width=\"8\" height=\"8\" fill=\"none\" stroke=\"" << col << "\" stroke-width=\"1.5\"/>\n";
    }
  }
  for (double xm : plot.marks_x)
    out << "<line x1=\"" << num(px(xm)) << "\" x2=\"" << num(px(xm)) << "\" y1=\"" << num(top) << "\" y2=\"" << num(bottom)
        << "\" stroke=\"#999999\" stroke-dasharray=\"4,3\"/>\n";
  out << "</g>\n";
  out << "<rect x=\"" << num(left) << "\" y=\"" << num(top) << "\" width=\"" << num(right - left) << "\" height=\""
      << num(bottom - top) << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  out << "<text x=\"" << num((left + right) / 2) << "\" y=\"" << num(height - font * 0.8) << "\" text-anchor=\"middle\">"
      << xml_escape(plot.x_label) << "</text>\n";
  out << "<text transform=\"translate(" << num(ox + font * 1.2) << "," << num((top + bottom) / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">" << xml_escape(plot.y_label) << "</text>\n";
  // Legend, top right inside the plot, as wide as its longest name (at the width assumed per character above).
  std::vector<std::pair<std::string, std::string>> entries;  // (name, colour)
  double widest = 0;
  for (std::size_t si = 0; si < plot.series.size(); ++si) {
    const LineSeries& s = plot.series[si];
    if (s.name.empty() || s.name.rfind("##", 0) == 0) continue;
    const std::string label = legend_name(plot, si, identical);
    entries.emplace_back(label.substr(0, label.find("##")),
                         hex_color(series_color(s.color >= 0 ? s.color : static_cast<int>(si))));
    widest = std::max(widest, static_cast<double>(across(entries.back().first)));
  }
  if (!entries.empty()) {
    const double box_right = right - font * 0.4, box_left = std::max(left + font * 0.4, box_right - widest - font * 2.0);
    out << "<rect x=\"" << num(box_left) << "\" y=\"" << num(top + font * 0.4) << "\" width=\"" << num(box_right - box_left)
        << "\" height=\"" << num(font * (0.5 + 1.3 * entries.size())) << "\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#cccccc\"/>\n";
    double ly = top + font * 1.6;
    for (const auto& [name, col] : entries) {
      out << "<rect x=\"" << num(box_left + font * 0.4) << "\" y=\"" << num(ly - font * 0.75) << "\" width=\"" << num(font * 0.8)
          << "\" height=\"" << num(font * 0.8) << "\" fill=\"" << col << "\"/>\n";
      out << "<text x=\"" << num(box_left + font * 1.5) << "\" y=\"" << num(ly) << "\">" << xml_escape(name) << "</text>\n";
      ly += font * 1.3;
    }
  }
  out << "</g>\n";
}

}  // namespace

std::string figure_svg(const Figure& figure, int width, int height, float font_px) {
  if (!figure.svg_capable())
    throw Error("figure '" + figure.title + "' has heatmap parts; SVG export covers line and bar plots only (use .png)");
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width
      << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height << "\">\n";
  out << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  const double part_w = static_cast<double>(width) / figure.parts.size();
  for (std::size_t i = 0; i < figure.parts.size(); ++i)
    line_plot_svg(out, std::get<LinePlot>(figure.parts[i]), part_w * i, part_w, height, font_px);
  out << "</svg>\n";
  return out.str();
}

}  // namespace kvscope::viewers
