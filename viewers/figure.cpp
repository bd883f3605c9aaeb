#include "viewers/figure.h"

#include <implot.h>
#include <implot_internal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>

#include "core/common/error.h"
#include "viewers/axis_ticks.h"
#include "viewers/drawlist_canvas.h"
#include "viewers/figure_size.h"
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

}  // namespace

Image map_image(const HeatmapPlot& p) {
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

namespace {

// A fitted line or bar plot keeps this share of its data's span free at each end, as the SVG writer does.
constexpr double kLinePlotMargin = 0.05;


// series_style.h's marker shapes, in its order.
ImPlotMarker implot_marker(int shape) {
  static const ImPlotMarker shapes[] = {ImPlotMarker_Circle, ImPlotMarker_Square, ImPlotMarker_Up, ImPlotMarker_Diamond,
                                        ImPlotMarker_Down};
  static_assert(static_cast<int>(std::size(shapes)) == kMarkerShapes);
  return shapes[((shape % kMarkerShapes) + kMarkerShapes) % kMarkerShapes];
}

// Series `s`'s first `n` points as a line in dash pattern `dash` (series_style.h), on the current plot; a NaN breaks
// it, as it breaks ImPlot's lines.
void draw_dashed_line(const LineSeries& s, int n, ImU32 col, float width, int dash) {
  std::vector<double> lengths = dash_lengths(dash);
  for (double& l : lengths) l *= width;
  ImDrawList* dl = ImPlot::GetPlotDrawList();
  ImPlot::PushPlotClipRect();
  std::vector<ImVec2> piece;
  for (int k = 0; k <= n; ++k) {
    if (k == n || !std::isfinite(s.x[k]) || !std::isfinite(s.y[k])) {
      add_dashed_path(*dl, piece, col, width, lengths);
      piece.clear();
      continue;
    }
    piece.push_back(ImPlot::PlotToPixels(s.x[k], s.y[k]));
  }
  ImPlot::PopPlotClipRect();
}

// Marker `shape` (series_style.h) centred at `c`, hollow, of radius `r`.
void add_marker_outline(ImDrawList& dl, int shape, ImVec2 c, float r, ImU32 col, float width) {
  switch (((shape % kMarkerShapes) + kMarkerShapes) % kMarkerShapes) {
    case 0: dl.AddCircle(c, r, col, 0, width); break;
    case 1: dl.AddRect(ImVec2(c.x - r, c.y - r), ImVec2(c.x + r, c.y + r), col, 0.0f, width); break;
    case 2: dl.AddTriangle(ImVec2(c.x, c.y - r * 1.2f), ImVec2(c.x + r * 1.1f, c.y + r * 0.8f), ImVec2(c.x - r * 1.1f, c.y + r * 0.8f), col, width); break;
    case 3: dl.AddQuad(ImVec2(c.x, c.y - r * 1.3f), ImVec2(c.x + r, c.y), ImVec2(c.x, c.y + r * 1.3f), ImVec2(c.x - r, c.y), col, width); break;
    default: dl.AddTriangle(ImVec2(c.x, c.y + r * 1.2f), ImVec2(c.x + r * 1.1f, c.y - r * 0.8f), ImVec2(c.x - r * 1.1f, c.y - r * 0.8f), col, width); break;
  }
}

// ImPlot's legend gives every entry a square of its colour, which cannot tell apart series of one colour (a sweep's
// cache types of one policy): over each line series' square, its marker shape (or its dashes, without markers), as
// the exported legends draw them. ImPlot's own entry layout (ShowLegendEntries: one text line and LegendSpacing
// apart, the icon a line high and 2 px in) places them; called after EndPlot, when the legend's rectangle is known.
void legend_marker_icons(const char* plot_title, const LinePlot& plot, const std::vector<std::string>& labels,
                         const std::vector<std::string>& identical) {
  ImPlotPlot* p = ImPlot::GetPlot(plot_title);
  if (!p || (p->Items.Legend.Flags & (ImPlotLegendFlags_Horizontal | ImPlotLegendFlags_Sort)) != 0) return;
  const ImPlotLegend& legend = p->Items.Legend;
  if (legend.Rect.GetWidth() <= 0) return;
  const ImPlotStyle& st = ImPlot::GetStyle();
  const float line = ImGui::GetTextLineHeight(), shrink = 2.0f;
  ImDrawList& dl = *ImGui::GetWindowDrawList();
  dl.PushClipRect(legend.RectClamped.Min, legend.RectClamped.Max, true);
  const ImU32 bg = ImPlot::GetStyleColorU32(ImPlotCol_LegendBg);
  for (int i = 0; i < p->Items.GetLegendCount(); ++i) {
    const std::string label = p->Items.GetLegendLabel(i);
    const auto at = std::find(labels.begin(), labels.end(), label);
    if (at == labels.end()) continue;
    const std::size_t si = static_cast<std::size_t>(at - labels.begin());
    const LineSeries& s = plot.series[si];
    const bool markers = s.kind == LineSeries::Kind::Markers || (s.kind == LineSeries::Kind::Line && (s.x.size() <= 64 || !identical[si].empty()));
    if (!markers && s.kind != LineSeries::Kind::Line) continue;  // bars and stairs keep their square
    const SeriesStyle style = line_style(s, si);
    const ImVec2 top_left(legend.Rect.Min.x + st.LegendInnerPadding.x,
                          legend.Rect.Min.y + st.LegendInnerPadding.y + i * (line + st.LegendSpacing.y));
    const ImVec2 lo(top_left.x + shrink, top_left.y + shrink), hi(top_left.x + line - shrink, top_left.y + line - shrink);
    const ImU32 text = ImPlot::GetStyleColorU32(ImPlotCol_LegendText);
    const ImU32 col = !p->Items.GetLegendItem(i)->Show ? ImAlphaU32(text, 0.25f)
                      : style.color == kInkSeries    ? text
                                                     : ImGui::GetColorU32(to_vec4(series_color(style.color)));
    dl.AddRectFilled(ImVec2(lo.x - 1, lo.y - 1), ImVec2(hi.x + 1, hi.y + 1), bg);
    const ImVec2 c((lo.x + hi.x) / 2, (lo.y + hi.y) / 2);
    const float w = std::max(1.5f, ImGui::GetFontSize() / 10.0f);
    if (markers) {
      add_marker_outline(dl, identical[si].empty() ? style.marker : 1, c, (hi.x - lo.x) * 0.36f, col, w);
    } else {
      std::vector<double> lengths = dash_lengths(style.dash);
      for (double& l : lengths) l *= w * 0.7;  // a shorter pattern, so the small icon shows it
      add_dashed_path(dl, {ImVec2(lo.x - 1, c.y), ImVec2(hi.x + 1, c.y)}, col, w, lengths);
    }
  }
  dl.PopClipRect();
}

}  // namespace

namespace {
thread_local FigureLook current_look = FigureLook::Kvscope;
thread_local ImFont* title_font = nullptr;  // draw_figure's titles (set_figure_title_font)
}  // namespace

SeriesLookScope::SeriesLookScope(FigureLook look) : previous_(current_look) { current_look = look; }
SeriesLookScope::~SeriesLookScope() { current_look = previous_; }

Rgba series_color(int index) { return look_series_color(current_look, index); }

void set_figure_title_font(ImFont* bold) { title_font = bold; }

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
    const SeriesStyle style = line_style(s, i);
    // Ink (marks over the curves) is the text's colour of the style drawn in: near-black ink vanished on the window's
    // dark plots.
    const ImVec4 col = style.color == kInkSeries ? ImPlot::GetStyleColorVec4(ImPlotCol_LegendText)
                                                 : to_vec4(series_color(style.color));
    ImPlotSpec spec;
    spec.LineColor = col;
    spec.FillColor = col;
    spec.LineWeight = std::max(1.5f, ImGui::GetFontSize() / 8.0f);  // thicker lines in large exported figures
    const char* label = labels[i].c_str();
    if (s.y_low.size() == s.x.size() && s.y_high.size() == s.x.size()) {
      ImPlotSpec band = spec;
      band.FillAlpha = 0.25f;
      // A point without an interval (NaN bounds: one prompt) breaks the band.
      for (int a = 0; a < n;) {
        if (!std::isfinite(s.y_low[a]) || !std::isfinite(s.y_high[a])) {
          ++a;
          continue;
        }
        int b = a;
        while (b < n && std::isfinite(s.y_low[b]) && std::isfinite(s.y_high[b])) ++b;
        ImPlot::PlotShaded(label, s.x.data() + a, s.y_low.data() + a, s.y_high.data() + a, b - a, band);
        a = b;
      }
    }
    switch (s.kind) {
      case LineSeries::Kind::Line: {
        const bool markers = n <= 64 || !identical[i].empty();
        if (markers) {
          // Few points: hollow markers of a shape per series, so curves drawn over each other stay apart.
          spec.Marker = identical[i].empty() ? implot_marker(style.marker) : ImPlotMarker_Square;
          spec.MarkerSize = std::max(3.0f, ImGui::GetFontSize() * 0.28f);
          spec.MarkerFillColor = ImVec4(0, 0, 0, 0);
        }
        if (style.dash == 0) {
          ImPlot::PlotLine(label, s.x.data(), s.y.data(), n, spec);
          break;
        }
        // ImPlot draws solid lines only: the item is the markers (invisible ones without markers, which still fit the
        // axes and make the legend entry), its line is dashed on the plot's draw list, as the exports dash it.
        if (!markers) spec.Marker = ImPlotMarker_Circle, spec.MarkerSize = 0.0f;
        ImPlot::PlotScatter(label, s.x.data(), s.y.data(), n, spec);
        if (const ImPlotItem* item = ImPlot::GetItem(label); item && item->Show)
          draw_dashed_line(s, n, ImGui::GetColorU32(spec.LineColor), spec.LineWeight, style.dash);
        break;
      }
      case LineSeries::Kind::Bars:
        spec.FillAlpha = 0.85f;
        ImPlot::PlotBars(label, s.x.data(), s.y.data(), n, s.bar_width, spec);
        break;
      case LineSeries::Kind::Stairs: ImPlot::PlotStairs(label, s.x.data(), s.y.data(), n, spec); break;
      case LineSeries::Kind::Markers:
        spec.Marker = implot_marker(style.marker);
        if (s.marker_scale != 1.0) {  // rings around other markers: hollow, so those show through
          spec.MarkerSize = std::max(3.0f, ImGui::GetFontSize() * 0.28f) * static_cast<float>(s.marker_scale);
          spec.MarkerFillColor = ImVec4(0, 0, 0, 0);
        }
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
  legend_marker_icons(title.c_str(), plot, labels, identical);
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
  const float bar_w = legend || !plot.colorbar ? 0.0f : std::round(font * 5.5f);
  const ImVec2 plot_size(std::max(50.0f, size.x - bar_w), size.y);
  const std::string signature = plot.signature + "|" + colormap_name(plot.cmap) + "|" +
                                std::to_string(static_cast<int>(plot.scale.kind)) + "|" + std::to_string(plot.scale.vmin) +
                                "|" + std::to_string(plot.scale.vmax);
  const ImTextureID tex = textures.get(id, signature, [&] { return map_image(plot); });
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
  // The plot area's top and bottom on screen, for the colour bar beside it.
  float plot_top = ImGui::GetCursorScreenPos().y, plot_bottom = plot_top + size.y;
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
    plot_top = ImPlot::GetPlotPos().y;
    plot_bottom = plot_top + ImPlot::GetPlotSize().y;
    ImPlot::EndPlot();
  }
  if (bar_w > 0) {
    ImGui::SameLine(0, 0);
    ImGui::PushID(id);
    draw_colour_bar(plot.scale, plot.cmap, plot.colorbar_label, ImVec2(bar_w, size.y), plot_top, plot_bottom);
    ImGui::PopID();
  }
}

namespace {

std::string log_tick_text(double exponent) {
  const int k = static_cast<int>(std::lround(exponent));
  if (k >= -2 && k <= 3) return tick_text(std::pow(10.0, k));
  return "1e" + std::to_string(k);
}

}  // namespace

std::vector<AxisTick> colour_bar_ticks(const ColorScale& scale, double pixels, double gap, const LabelExtent& extent) {
  const double lo = scale.axis_min(), hi = scale.axis_max();
  const double inf = std::numeric_limits<double>::infinity();
  if (scale.kind == ScaleKind::Log) return spaced_integer_ticks(lo, hi, pixels, gap, inf, log_tick_text, extent);
  return spaced_linear_ticks(lo, hi, pixels, gap, inf, tick_text, extent);
}

std::string colour_bar_title(const std::string& label, ScaleKind kind) {
  if (kind == ScaleKind::Log && label.rfind("log10 ", 0) == 0) return label.substr(6) + " (log scale)";
  return label;
}

void draw_colour_bar(const ColorScale& scale, Colormap cmap, const std::string& label, ImVec2 size, float top,
                     float bottom) {
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::Dummy(size);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float font = ImGui::GetFontSize();
  const float x0 = p.x + font * 0.5f, x1 = x0 + font * 1.0f;
  const float h = std::max(1.0f, bottom - top);
  constexpr int kSlices = 128;
  for (int i = 0; i < kSlices; ++i) {
    const Rgba c = sample_colormap(cmap, 1.0f - (i + 0.5f) / kSlices);
    dl->AddRectFilled(ImVec2(x0, top + h * i / kSlices), ImVec2(x1, top + h * (i + 1) / kSlices + 0.5f),
                      IM_COL32(c.r, c.g, c.b, 255));
  }
  const ImU32 ink = ImGui::GetColorU32(ImGuiCol_Text);
  dl->AddRect(ImVec2(x0, top), ImVec2(x1, top + h), ink);
  const LabelExtent up = [font](const std::string&) { return 1.2f * font; };
  const double lo = scale.axis_min(), hi = scale.axis_max();
  float widest = 0;
  const float tick = font * 0.3f;
  for (const AxisTick& t : colour_bar_ticks(scale, h, kLabelGapUpEm * font, up)) {
    if (!t.major || !(hi > lo)) continue;
    const float y = top + h - static_cast<float>((t.value - lo) / (hi - lo)) * h;
    dl->AddLine(ImVec2(x1, y), ImVec2(x1 + tick, y), ink);
    const ImVec2 ts = ImGui::CalcTextSize(t.label.c_str());
    dl->AddText(ImVec2(x1 + tick + font * 0.25f, y - ts.y / 2), ink, t.label.c_str());
    widest = std::max(widest, ts.x);
  }
  std::string title = colour_bar_title(label, scale.kind);
  // Centred on the part of the bar on screen: a bar beside several rows of maps in a scrolled grid (Compare) would
  // otherwise centre its title below the panel's edge and show "attention (log sca".
  const float shown_top = std::max(top, dl->GetClipRectMin().y), shown_bottom = std::min(top + h, dl->GetClipRectMax().y);
  const float room = std::max(0.0f, shown_bottom - shown_top);
  // No longer than that: a short bar (a difference map of a few decode steps) must not write into the row above.
  while (title.size() > 1 && ImGui::CalcTextSize(title.c_str()).x > room) title.pop_back();
  if (title.empty() || room <= 0.0f) return;
  const ImVec2 ts = ImGui::CalcTextSize(title.c_str());
  // ImPlot's vertical text reads upwards from `pos`, its baseline at pos.x + the line height.
  ImPlot::AddTextVertical(dl, ImVec2(x1 + tick + font * 0.5f + widest, shown_top + room / 2 + std::min(ts.x, room) / 2),
                          ink, title.c_str());
}

std::string colour_scale_key(const HeatmapPlot& p) {
  if (!p.categories.empty()) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%d|%d|%.6g|%.6g|", static_cast<int>(p.cmap), static_cast<int>(p.scale.kind),
                p.scale.vmin, p.scale.vmax);
  return buf + p.colorbar_label;
}

namespace {

// `text` in lines no wider than `width` at the current font, broken between words (a longer word stays whole).
std::vector<std::string> wrap_words(const std::string& text, float width) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    const std::string joined = line.empty() ? w : line + " " + w;
    if (!line.empty() && ImGui::CalcTextSize(joined.c_str()).x > width) lines.push_back(line), line = w;
    else line = joined;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

void draw_figure(const Figure& figure, ImVec2 size, TextureStore& textures) {
  const int n = static_cast<int>(figure.parts.size());
  if (n == 0) return;
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  // Maps on one scale (compare columns) share one bar at the right.
  std::map<std::string, int> counts;
  for (const auto& p : figure.parts)
    if (const auto* hp = std::get_if<HeatmapPlot>(&p))
      if (!colour_scale_key(*hp).empty()) ++counts[colour_scale_key(*hp)];
  std::vector<const HeatmapPlot*> shared;
  for (const auto& p : figure.parts)
    if (const auto* hp = std::get_if<HeatmapPlot>(&p)) {
      const std::string key = colour_scale_key(*hp);
      if (!key.empty() && counts[key] >= 2 &&
          std::none_of(shared.begin(), shared.end(), [&](const HeatmapPlot* s) { return colour_scale_key(*s) == key; }))
        shared.push_back(hp);
    }
  const float bar_w = std::round(font * static_cast<float>(kColorbarEm));
  const float grid_w = size.x - bar_w * shared.size();
  // The rows the vector layout picks for the whole figure (this size is the window's content, a margin less).
  const int per_row = parts_per_row(figure, size.x + 2 * style.WindowPadding.x, font);
  const int rows = (n + per_row - 1) / per_row;
  const float cell_w = (grid_w - style.ItemSpacing.x * (per_row - 1)) / per_row;
  const float h = (size.y - style.ItemSpacing.y * (rows - 1)) / rows;
  float maps_top = std::numeric_limits<float>::max(), maps_bottom = 0;  // the plot areas of maps sharing a bar
  ImGui::BeginGroup();
  for (int i = 0; i < n; ++i) {
    if (i % per_row) ImGui::SameLine();
    const std::string id = "part" + std::to_string(i);
    // The last part takes the rest of its row (a difference map beside its own colour bar needs the room).
    const float w = i + 1 == n ? grid_w - (i % per_row) * (cell_w + style.ItemSpacing.x) : cell_w;
    ImGui::BeginGroup();
    // The title above the plot, wrapped to its width, rather than ImPlot's one line cut at the plot's edges.
    auto title_lines = [&](const std::string& title) {
      // As the SVG and PDF draw them (figure_vector.cpp): 1.2 times the text, bold in kvscope's look, regular in
      // matplotlib's. Without a title font (the window), the text font.
      const bool styled = title_font != nullptr;
      if (styled) ImGui::PushFont(current_look == FigureLook::Matplotlib ? nullptr : title_font, font * 1.2f);
      const std::vector<std::string> lines = wrap_words(title, w - font);
      const ImVec2 start = ImGui::GetCursorPos();
      for (const auto& line : lines) {
        ImGui::SetCursorPosX(start.x + std::max(0.0f, (w - ImGui::CalcTextSize(line.c_str()).x) / 2));
        ImGui::TextUnformatted(line.c_str());
      }
      const float used = static_cast<float>(lines.size()) * ImGui::GetTextLineHeightWithSpacing();
      if (styled) ImGui::PopFont();
      return used;
    };
    if (const auto* lp = std::get_if<LinePlot>(&figure.parts[i])) {
      LinePlot p = *lp;
      const float used = title_lines(p.title);
      p.title.clear();
      draw_line_plot(id.c_str(), p, ImVec2(w, h - used));
    } else {
      HeatmapPlot p = std::get<HeatmapPlot>(figure.parts[i]);
      const std::string key = colour_scale_key(p);
      p.colorbar = key.empty() || counts[key] < 2;
      const float used = title_lines(p.title);
      p.title.clear();
      draw_heatmap(id.c_str(), p, ImVec2(w, h - used), textures, [&] {
        if (p.colorbar) return;
        maps_top = std::min(maps_top, ImPlot::GetPlotPos().y);
        maps_bottom = std::max(maps_bottom, ImPlot::GetPlotPos().y + ImPlot::GetPlotSize().y);
      });
    }
    ImGui::EndGroup();
  }
  ImGui::EndGroup();
  for (std::size_t s = 0; s < shared.size(); ++s) {
    ImGui::SameLine(0, 0);
    ImGui::PushID(static_cast<int>(s));
    draw_colour_bar(shared[s]->scale, shared[s]->cmap, shared[s]->colorbar_label, ImVec2(bar_w, size.y), maps_top,
                    std::max(maps_top + 1, maps_bottom));
    ImGui::PopID();
  }
}

}  // namespace kvscope::viewers
