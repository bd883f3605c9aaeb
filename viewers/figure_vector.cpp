#include "viewers/figure_vector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "core/common/error.h"
#include "viewers/axis_ticks.h"
#include "viewers/figure_size.h"
#include "viewers/font_metrics.h"
#include "viewers/pdf_canvas.h"
#include "viewers/plot_readout.h"
#include "viewers/svg_canvas.h"

namespace kvscope::viewers {

namespace {

// A fitted line or bar plot keeps this share of its data's span free at each end, as the window does.
constexpr double kMargin = 0.05;

struct Look {
  VectorCanvas& canvas;
  const VectorOptions& o;
  const FigureFont& font = figure_font();
  double pt = 1, fs = 16, title_fs = 19, tick_len = 5;
  bool mpl = false;
  bool title_bold = true;
  Stroke spine, tick, grid;

  Look(VectorCanvas& c, const VectorOptions& options) : canvas(c), o(options) {
    pt = o.dpi / 72.0;
    fs = o.font_px;
    mpl = o.look == FigureLook::Matplotlib;
    // matplotlib: titles "large" (1.2 x), regular weight; spines and ticks 0.8 pt, ticks 3.5 pt outward.
    title_fs = fs * 1.2;
    title_bold = !mpl;
    const double unit = std::max(1.0, fs / 10.0);  // points scaled to the font: 10 pt text gets matplotlib's sizes
    spine = Stroke{mpl ? Rgba{0, 0, 0, 255} : Rgba{51, 51, 51, 255}, 0.8 * unit};
    tick = Stroke{spine.color, 0.8 * unit};
    grid = Stroke{Rgba{224, 224, 224, 255}, 0.6 * unit};
    tick_len = 3.5 * unit;
  }
  double width(const std::string& s, double size, bool bold = false) const { return font.text_width(s, size, bold); }
  double line_w() const { return 1.5 * std::max(1.0, fs / 10.0); }
  Rgba series(int i) const { return look_series_color(o.look, i); }
  void text(double x, double y, const std::string& s, double size, double anchor, bool bold = false, bool upright = false) {
    TextStyle st;
    st.size = size, st.anchor = anchor, st.bold = bold, st.upright = upright;
    canvas.text(x, y, s, st);
  }
};

// Words of `text` in lines no wider than `width` (a word wider than that is cut, and it goes on in the next line);
// at most `max_lines`, the last ending in "..." when text is left over.
std::vector<std::string> wrap(const Look& lk, const std::string& text, double width, double size, bool bold,
                              std::size_t max_lines = 3) {
  std::vector<std::string> lines;
  std::string line;
  auto fits = [&](const std::string& s) { return lk.width(s, size, bold) <= width; };
  std::size_t i = 0;
  bool cut = false;
  while (i < text.size()) {
    std::size_t j = text.find(' ', i);
    if (j == std::string::npos) j = text.size();
    std::string word = text.substr(i, j - i);
    i = j + 1;
    const std::string joined = line.empty() ? word : line + " " + word;
    if (fits(joined)) {
      line = joined;
      continue;
    }
    if (!line.empty()) lines.push_back(line), line.clear();
    while (!fits(word) && word.size() > 1) {  // a word longer than the line: cut it
      std::size_t k = word.size() - 1;
      while (k > 1 && !fits(word.substr(0, k))) --k;
      lines.push_back(word.substr(0, k));
      word = word.substr(k);
    }
    line = word;
  }
  if (!line.empty()) lines.push_back(line);
  if (lines.size() > max_lines) {
    lines.resize(max_lines);
    cut = true;
  }
  if (cut) {
    std::string& last = lines.back();
    while (!last.empty() && !fits(last + "...")) last.pop_back();
    last += "...";
  }
  return lines;
}

// The title's lines, wrapped to the part's width `w` from `x`, each centred over the plot (centre `mid`) as far as
// the part's edges allow; returns the height they take.
double draw_title(Look& lk, const std::string& title, double x, double y, double w, double mid, bool draw = true) {
  if (title.empty()) return lk.fs * 0.5;
  // A word wider than the part (a long run name in a narrow column) first makes the title smaller, down to 0.8
  // of the body text's size; only then is it cut.
  double size = lk.title_fs;
  std::size_t longest_at = 0, longest_n = 0;
  for (std::size_t i = 0; i <= title.size();) {
    std::size_t j = title.find(' ', i);
    if (j == std::string::npos) j = title.size();
    if (lk.width(title.substr(i, j - i), 1.0, lk.title_bold) > lk.width(title.substr(longest_at, longest_n), 1.0, lk.title_bold))
      longest_at = i, longest_n = j - i;
    i = j + 1;
  }
  const double room = w - lk.fs * 0.6;
  const double longest = lk.width(title.substr(longest_at, longest_n), size, lk.title_bold);
  if (longest > room) size = std::max(0.8 * lk.fs, 0.98 * size * room / longest);
  const auto lines = wrap(lk, title, room, size, lk.title_bold);
  const double lh = size * 1.2;
  if (draw)
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const double half = lk.width(lines[i], size, lk.title_bold) / 2;
      const double cx = std::clamp(mid, x + half + lk.fs * 0.3, std::max(x + half + lk.fs * 0.3, x + w - half - lk.fs * 0.3));
      lk.text(cx, y + lh * i + size, lines[i], size, 0.5, lk.title_bold);
    }
  return lh * lines.size() + lk.fs * 0.5;
}

struct LegendEntry {
  std::string name;
  Rgba color;
  bool bar = false;
  int marker = -1;  // marker shape, -1 none
  int dash = 0;     // the line's dash pattern (series_style.h)
  bool line = true;  // false: markers alone (a scatter)
};

// A data line of colour `col` in dash pattern `dash`, its dashes scaled to the line's width.
Stroke line_stroke(const Look& lk, Rgba col, int dash) {
  std::vector<double> lengths = dash_lengths(dash);
  for (double& l : lengths) l *= lk.line_w();
  return Stroke{col, lk.line_w(), std::move(lengths)};
}

// Marker shapes by series: distinct outlines, so series drawn over each other stay tellable apart.
void marker(Look& lk, int shape, Point p, double r, Rgba col) {
  const Stroke s{col, lk.line_w() * 0.8};
  switch (shape % 5) {
    case 0: lk.canvas.circle(p, r, nullptr, &s); break;
    case 1: lk.canvas.polyline({{p[0] - r, p[1] - r}, {p[0] + r, p[1] - r}, {p[0] + r, p[1] + r}, {p[0] - r, p[1] + r}, {p[0] - r, p[1] - r}}, s); break;
    case 2: lk.canvas.polyline({{p[0], p[1] - r * 1.2}, {p[0] + r * 1.1, p[1] + r * 0.8}, {p[0] - r * 1.1, p[1] + r * 0.8}, {p[0], p[1] - r * 1.2}}, s); break;
    case 3: lk.canvas.polyline({{p[0], p[1] - r * 1.3}, {p[0] + r, p[1]}, {p[0], p[1] + r * 1.3}, {p[0] - r, p[1]}, {p[0], p[1] - r * 1.3}}, s); break;
    default: lk.canvas.polyline({{p[0], p[1] + r * 1.2}, {p[0] + r * 1.1, p[1] - r * 0.8}, {p[0] - r * 1.1, p[1] - r * 0.8}, {p[0], p[1] + r * 1.2}}, s); break;
  }
}

double legend_width(const Look& lk, const std::vector<LegendEntry>& entries) {
  double widest = 0;
  for (const auto& e : entries) widest = std::max(widest, lk.width(e.name, lk.fs));
  return entries.empty() ? 0.0 : widest + lk.fs * 3.2;
}

// A framed legend, one entry a line, top left at (x, y).
void draw_legend(Look& lk, const std::vector<LegendEntry>& entries, double x, double y) {
  if (entries.empty()) return;
  const double lh = lk.fs * 1.35, w = legend_width(lk, entries) - lk.fs * 0.4;
  lk.canvas.rect(x, y, w, lh * entries.size() + lk.fs * 0.5, Rgba{255, 255, 255, 255}, 1.0);
  lk.canvas.rect_outline(x, y, w, lh * entries.size() + lk.fs * 0.5, Stroke{Rgba{204, 204, 204, 255}, lk.spine.width});
  double ly = y + lk.fs * 0.25 + lh * 0.5;
  for (const auto& e : entries) {
    const double sx = x + lk.fs * 0.4;
    if (e.bar) {
      lk.canvas.rect(sx + lk.fs * 0.3, ly - lk.fs * 0.4, lk.fs * 0.8, lk.fs * 0.8, e.color, 1.0);
    } else {
      if (e.line) lk.canvas.line({sx, ly}, {sx + lk.fs * 1.6, ly}, line_stroke(lk, e.color, e.dash));
      if (e.marker >= 0) marker(lk, e.marker, {sx + lk.fs * 0.8, ly}, lk.fs * 0.28, e.color);
    }
    lk.text(sx + lk.fs * 2.1, ly + lk.fs * 0.35, e.name, lk.fs, 0.0);
    ly += lh;
  }
}

void draw_line_part(Look& lk, const LinePlot& plot, double x, double y, double w, double h) {
  const double fs = lk.fs;
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
  // Bars grow from zero, up or down: the axis holds zero and every bar's end.
  if (bars && !plot.log_y) y_lo = std::min(y_lo, 0.0), y_hi = std::max(y_hi, 0.0);
  if (plot.y_limits) y_lo = (*plot.y_limits)[0], y_hi = (*plot.y_limits)[1];
  if (x_hi <= x_lo) x_hi = x_lo + 1;
  if (y_hi <= y_lo) y_hi = y_lo + 1;
  auto ty = [&](double v) { return plot.log_y ? std::log10(std::max(v, 1e-300)) : v; };
  double a = ty(y_lo), b = ty(y_hi);
  const double pad = kMargin * (b - a);
  if (!plot.y_limits) a -= pad, b += pad;
  const double xpad = kMargin * (x_hi - x_lo);
  const bool categories = !plot.x_tick_labels.empty();
  const double xa = categories ? -0.5 : x_lo - xpad;
  const double xb = categories ? plot.x_tick_labels.size() - 0.5 : x_hi + xpad;

  const std::vector<std::string> identical = identical_to(plot);
  std::vector<LegendEntry> entries;
  for (std::size_t si = 0; si < plot.series.size(); ++si) {
    const LineSeries& s = plot.series[si];
    if (s.name.empty() || s.name.rfind("##", 0) == 0) continue;
    const std::string label = legend_name(plot, si, identical);
    const bool markers = s.kind == LineSeries::Kind::Markers || (s.kind == LineSeries::Kind::Line && s.x.size() <= 64);
    const SeriesStyle style = line_style(s, si);
    entries.push_back({label.substr(0, label.find("##")), lk.series(style.color), s.kind == LineSeries::Kind::Bars,
                       markers ? (identical[si].empty() ? style.marker : 1) : -1, style.dash,
                       s.kind != LineSeries::Kind::Markers});
  }
  const double title_h = draw_title(lk, plot.title, x, y, w, 0, false);
  // The legend goes beside the data: right of the plot when that leaves the plot most of the width, else under it.
  double legend_w = legend_width(lk, entries);
  const bool legend_right = legend_w > 0 && legend_w <= 0.4 * w;
  const double legend_h = entries.empty() ? 0.0 : fs * 1.35 * entries.size() + fs * 0.5;
  const double y_label_w = plot.y_label.empty() ? 0.0 : fs * 1.4;
  const double x_label_h = plot.x_label.empty() ? 0.0 : fs * 1.4;
  const double top = y + title_h;
  const double right = x + w - (legend_right ? legend_w + fs * 0.2 : fs * 0.8);
  // Pass 1 sizes the y tick labels on a guessed height; the category labels then pick across or upright.
  const LabelExtent up = [fs](const std::string&) { return 1.2f * static_cast<float>(fs); };
  const LabelExtent across = [&lk](const std::string& s) { return static_cast<float>(lk.width(s, lk.fs)); };
  const double inf = std::numeric_limits<double>::infinity();
  auto y_ticks = [&](double pixels) {
    return plot.log_y ? spaced_log_ticks(std::pow(10.0, a), std::pow(10.0, b), pixels, kLabelGapUpEm * fs, inf, tick_text, up)
                      : spaced_linear_ticks(a, b, pixels, kLabelGapUpEm * fs, inf, tick_text, up);
  };
  double y_tick_w = 0;
  for (const AxisTick& t : y_ticks(h * 0.6))
    if (t.major) y_tick_w = std::max(y_tick_w, lk.width(t.label, fs));
  const double left = x + fs * 0.3 + y_label_w + y_tick_w + lk.tick_len + fs * 0.3;
  const double plot_w = std::max(fs, right - left);
  bool upright = false;
  double x_tick_h = fs * 1.3;
  if (categories) {
    const double slot = plot_w / plot.x_tick_labels.size();
    double widest = 0;
    for (const auto& n : plot.x_tick_labels) widest = std::max(widest, lk.width(n, fs));
    if (widest + fs * 0.5 > slot) {
      upright = true;
      x_tick_h = std::min(widest, h * 0.35) + fs * 0.5;
    }
  }
  const double bottom = y + h - x_label_h - x_tick_h - lk.tick_len - (legend_right ? 0.0 : legend_h) - fs * 0.3;
  const double plot_h = std::max(fs, bottom - top);
  auto px = [&](double v) { return left + (v - xa) / (xb - xa) * plot_w; };
  auto py = [&](double v) { return bottom - (ty(v) - a) / (b - a) * plot_h; };

  draw_title(lk, plot.title, x, y, w, left + plot_w / 2);
  const std::vector<AxisTick> yt = y_ticks(plot_h);
  for (const AxisTick& t : yt) {
    if (!t.major) continue;
    const double yy = py(t.value);
    if (!lk.mpl) lk.canvas.line({left, yy}, {left + plot_w, yy}, lk.grid);
    lk.canvas.line({left - lk.tick_len, yy}, {left, yy}, lk.tick);
    lk.text(left - lk.tick_len - fs * 0.3, yy + fs * 0.35, t.label, fs, 1.0);
  }
  std::vector<AxisTick> xt;
  if (!categories) {
    xt = spaced_linear_ticks(xa, xb, plot_w, kLabelGapAcrossEm * fs, 0.4 * fs, tick_text, across);
    if (plot.integer_x) xt = spaced_integer_ticks(xa, xb, plot_w, kLabelGapAcrossEm * fs, 0.4 * fs, tick_text, across);
  } else if (upright) {
    // Upright names need a line's height each, not their width.
    xt = spaced_category_ticks(xa, xb, plot_w, 0.2 * fs, 0.4 * fs, plot.x_tick_labels, up);
  } else {
    xt = spaced_category_ticks(xa, xb, plot_w, kLabelGapAcrossEm * fs, 0.4 * fs, plot.x_tick_labels, across);
  }
  for (const AxisTick& t : xt) {
    if (!t.major) continue;
    const double xx = px(t.value);
    if (!lk.mpl && !categories) lk.canvas.line({xx, top}, {xx, bottom}, lk.grid);
    lk.canvas.line({xx, bottom}, {xx, bottom + lk.tick_len}, lk.tick);
    if (upright) {
      std::string name = t.label;
      while (name.size() > 1 && lk.width(name, fs) > h * 0.35) name.pop_back();
      if (name != t.label) name += "...";
      lk.text(xx + fs * 0.35, bottom + lk.tick_len + fs * 0.3, name, fs, 1.0, false, true);
    } else {
      lk.text(xx, bottom + lk.tick_len + fs * 1.05, t.label, fs, 0.5);
    }
  }
  // Data, cut to the plot area.
  lk.canvas.clip_begin(left, top, plot_w, plot_h);
  for (std::size_t si = 0; si < plot.series.size(); ++si) {
    const LineSeries& s = plot.series[si];
    const SeriesStyle style = line_style(s, si);
    const Rgba col = lk.series(style.color);
    const std::size_t n = std::min(s.x.size(), s.y.size());
    if (s.y_low.size() == s.x.size() && s.y_high.size() == s.x.size() && n > 0) {
      // A point without an interval (NaN bounds) breaks the band.
      auto finite = [&](std::size_t i) { return std::isfinite(s.y_low[i]) && std::isfinite(s.y_high[i]); };
      for (std::size_t a0 = 0; a0 < n;) {
        if (!finite(a0)) {
          ++a0;
          continue;
        }
        std::size_t b0 = a0;
        while (b0 < n && finite(b0)) ++b0;
        std::vector<Point> band;
        for (std::size_t i = a0; i < b0; ++i) band.push_back({px(s.x[i]), py(s.y_high[i])});
        for (std::size_t i = b0; i-- > a0;) band.push_back({px(s.x[i]), py(s.y_low[i])});
        lk.canvas.polygon(band, col, 0.25);
        a0 = b0;
      }
    }
    if (s.kind == LineSeries::Kind::Bars) {
      // A bar spans from the base (zero, or the axis floor of a log plot) to its value, below zero for a negative one.
      const double base = plot.log_y ? std::pow(10.0, a) : 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        if (!std::isfinite(s.y[i]) || (plot.log_y && s.y[i] <= 0)) continue;
        const double x0 = px(s.x[i] - s.bar_width / 2), x1 = px(s.x[i] + s.bar_width / 2);
        const double y0 = py(s.y[i]), y1 = py(base);
        lk.canvas.rect(x0, std::min(y0, y1), x1 - x0, std::fabs(y1 - y0), col, 0.85);
      }
      continue;
    }
    std::vector<Point> points;
    std::vector<std::vector<Point>> pieces;
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isfinite(s.y[i]) || (plot.log_y && s.y[i] <= 0)) {  // NaN breaks the line, as in the window
        if (!points.empty()) pieces.push_back(std::move(points)), points.clear();
        continue;
      }
      Point p{px(s.x[i]), py(s.y[i])};
      if (s.kind == LineSeries::Kind::Stairs && !points.empty()) points.push_back({p[0], points.back()[1]});
      points.push_back(p);
    }
    if (!points.empty()) pieces.push_back(std::move(points));
    if (s.kind != LineSeries::Kind::Markers)
      for (const auto& piece : pieces) lk.canvas.polyline(piece, line_stroke(lk, col, style.dash));
    // Points get markers where there are few enough to tell apart, each series its own shape.
    const bool markers = s.kind == LineSeries::Kind::Markers || (s.kind == LineSeries::Kind::Line && n <= 64);
    if (markers || !identical[si].empty())
      for (const auto& piece : pieces)
        for (const Point& p : piece) marker(lk, identical[si].empty() ? style.marker : 1, p, fs * 0.28 * s.marker_scale, col);
  }
  for (double xm : plot.marks_x)
    lk.canvas.line({px(xm), top}, {px(xm), bottom}, Stroke{Rgba{153, 153, 153, 255}, lk.spine.width, {4 * lk.spine.width, 3 * lk.spine.width}});
  lk.canvas.clip_end();
  lk.canvas.rect_outline(left, top, plot_w, plot_h, lk.spine);
  if (!plot.x_label.empty()) lk.text(left + plot_w / 2, bottom + lk.tick_len + x_tick_h + fs * 1.1, plot.x_label, fs, 0.5);
  if (!plot.y_label.empty()) {
    std::string label = plot.y_label;
    if (lk.width(label, fs) > plot_h && label.find(" (") != std::string::npos) label = label.substr(0, label.find(" ("));
    lk.text(x + fs * 0.3 + fs, top + plot_h / 2, label, fs, 0.5, false, true);
  }
  if (legend_right) draw_legend(lk, entries, right + fs * 0.4, top);
  else draw_legend(lk, entries, left, y + h - legend_h);
}

std::vector<AxisTick> colorbar_ticks(const Look& lk, const HeatmapPlot& p, double h) {
  const LabelExtent up = [&lk](const std::string&) { return 1.2f * static_cast<float>(lk.fs); };
  return colour_bar_ticks(p.scale, h, kLabelGapUpEm * lk.fs, up);
}

// The colour bar's title for a bar `h` tall, in lines read upwards side by side: one when it fits along the bar,
// else two (the short bar of a difference map in a column figure cut "attention difference" to "attention differ").
std::vector<std::string> colorbar_title_lines(const Look& lk, const HeatmapPlot& p, double h) {
  const std::string label = colour_bar_title(p.colorbar_label, p.scale.kind);
  if (label.empty()) return {};
  if (lk.width(label, lk.fs) <= h) return {label};
  return wrap(lk, label, h, lk.fs, false, 2);
}

double colorbar_width(const Look& lk, const HeatmapPlot& p, double h) {
  double widest = 0;
  for (const AxisTick& t : colorbar_ticks(lk, p, h))
    if (t.major) widest = std::max(widest, lk.width(t.label, lk.fs));
  const std::size_t lines = colorbar_title_lines(lk, p, h).size();
  return lk.fs * 0.6 + lk.fs * 1.0 + lk.tick_len + lk.fs * 0.3 + widest +
         (lines == 0 ? 0.0 : lk.fs * 1.6 + lk.fs * 1.2 * static_cast<double>(lines - 1));
}

// A colour bar whose gradient spans [top, top + h) at x.
void draw_colorbar(Look& lk, const HeatmapPlot& p, double x, double top, double h, double layout_h = 0) {
  const double bx = x + lk.fs * 0.6, bw = lk.fs * 1.0;
  Image grad(1, 256);
  for (int i = 0; i < 256; ++i) grad.set(0, i, sample_colormap(p.cmap, 1.0f - i / 255.0f));
  lk.canvas.image(bx, top, bw, h, grad);
  lk.canvas.rect_outline(bx, top, bw, h, lk.spine);
  const double lo = p.scale.axis_min(), hi = p.scale.axis_max();
  double widest = 0;
  for (const AxisTick& t : colorbar_ticks(lk, p, h)) {
    if (!t.major || !(hi > lo)) continue;
    const double yy = top + h - (t.value - lo) / (hi - lo) * h;
    lk.canvas.line({bx + bw, yy}, {bx + bw + lk.tick_len, yy}, lk.tick);
    lk.text(bx + bw + lk.tick_len + lk.fs * 0.3, yy + lk.fs * 0.35, t.label, lk.fs, 0.0);
    widest = std::max(widest, lk.width(t.label, lk.fs));
  }
  // Laid out for `layout_h` (the height colorbar_width reserved room for), so the lines stay inside that room.
  const auto lines = colorbar_title_lines(lk, p, layout_h > 0 ? layout_h : h);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string shown = lines[i];
    while (shown.size() > 1 && lk.width(shown, lk.fs) > h) shown.pop_back();
    lk.text(bx + bw + lk.tick_len + lk.fs * 0.3 + widest + lk.fs * (1.2 + 1.2 * static_cast<double>(i)), top + h / 2,
            shown, lk.fs, 0.5, false, true);
  }
}

// Token names on a map's axis, as the window's axes give them once the cells are wide enough (axis_ticks.cpp's
// token_locator): across when every visible cell holds its token, upright (the key axis) when a cell is a line
// wide but too narrow for that; numbers otherwise.
enum class TokenMode { Numbers, Across, Upright };
struct TokenAxis {
  TokenMode mode = TokenMode::Numbers;
  int first = 0, last = -1;
  double band = 0;  // the labels' extent away from the axis, in pixels
};

std::string upright_token(const Look& lk, const std::string& token) {
  const double most = 8.0 * lk.fs;  // as the window cuts them (kRotatedLabelEms)
  if (lk.width(token, lk.fs) <= most) return token;
  std::string cut = token;
  while (!cut.empty() && lk.width(cut + "..", lk.fs) > most) cut.pop_back();
  while (!cut.empty() && (static_cast<unsigned char>(cut.back()) & 0xC0) == 0x80) cut.pop_back();  // whole UTF-8
  if (!cut.empty() && (static_cast<unsigned char>(cut.back()) & 0x80)) cut.pop_back();
  return cut + "..";
}

TokenAxis token_axis(const Look& lk, const std::vector<std::string>& tokens, double lo, double hi, double pixels,
                     bool vertical) {
  TokenAxis t;
  t.first = std::max(0, static_cast<int>(std::ceil(lo - 0.5)));
  t.last = std::min(static_cast<int>(tokens.size()) - 1, static_cast<int>(std::floor(hi - 0.5)));
  if (!(hi > lo) || t.last < t.first || t.last - t.first >= 200) return t;
  const double cell = pixels / (hi - lo), line = 1.05 * lk.fs;
  bool fits = !vertical || cell >= line;
  double widest = 0;
  for (int c = t.first; c <= t.last; ++c) {
    const double w = lk.width(tokens[static_cast<std::size_t>(c)], lk.fs);
    widest = std::max(widest, w);
    if (!vertical && cell < w + 0.4 * lk.fs) fits = false;
  }
  if (fits) {
    t.mode = TokenMode::Across;
    t.band = vertical ? widest : lk.fs * 1.3;
  } else if (!vertical && cell >= line) {
    t.mode = TokenMode::Upright;
    for (int c = t.first; c <= t.last; ++c)
      t.band = std::max(t.band, lk.width(upright_token(lk, tokens[static_cast<std::size_t>(c)]), lk.fs));
    t.band += lk.fs * 0.3;
  }
  return t;
}

constexpr Rgba kEvicted{214, 39, 40, 255};
constexpr Rgba kMerged{255, 160, 20, 255};

// Returns the plot area's top and height, for a colour bar shared with neighbours.
std::pair<double, double> draw_heatmap_part(Look& lk, const HeatmapPlot& plot, double x, double y, double w, double h,
                                            bool own_colorbar) {
  const double fs = lk.fs;
  const trace::Map2D& m = plot.map;
  std::vector<LegendEntry> entries;
  for (const auto& c : plot.categories) entries.push_back({c.name, c.color, true});
  const bool marks = !plot.column_marks.empty();
  if (plot.mark_legend && marks) {
    bool evicted = false, merged = false;
    for (uint8_t v : plot.column_marks) evicted |= v == 1, merged |= v == 2;
    if (evicted) entries.push_back({"evicted key", kEvicted, true});
    if (merged) entries.push_back({"merged key", kMerged, true});
  }
  if (plot.mark_legend && !plot.no_attention_label.empty()) entries.push_back({plot.no_attention_label, kNoAttentionColor, true});
  // Legend entries in a row under the x label, wrapping.
  std::vector<std::vector<LegendEntry>> legend_rows(entries.empty() ? 0 : 1);
  double row_w = 0;
  for (const auto& e : entries) {
    const double ew = lk.width(e.name, fs) + fs * 2.0;
    if (row_w + ew > w && !legend_rows.back().empty()) legend_rows.emplace_back(), row_w = 0;
    legend_rows.back().push_back(e);
    row_w += ew;
  }
  const double legend_h = legend_rows.size() * fs * 1.4;
  const double title_h = draw_title(lk, plot.title, x, y, w, 0, false);
  const double top = y + title_h;
  const double y_label_w = plot.y_label.empty() ? 0.0 : fs * 1.4;
  const double x_label_h = plot.x_label.empty() ? 0.0 : fs * 1.4;
  const double strip_h = marks ? fs * 0.6 : 0.0;
  double bottom = y + h - legend_h - x_label_h - fs * 1.3 - lk.tick_len - strip_h - fs * 0.3;
  double plot_h = std::max(fs, bottom - top);
  double bar_w = own_colorbar && plot.categories.empty() ? colorbar_width(lk, plot, plot_h) : 0.0;
  double x0 = plot.x_origin, x1 = x0 + std::max(1, m.source_cols);
  double y0 = plot.y_origin, y1 = y0 + std::max(1, m.source_rows);
  if (plot.view) x0 = (*plot.view)[0], x1 = (*plot.view)[1], y0 = (*plot.view)[2], y1 = (*plot.view)[3];
  const LabelExtent up = [fs](const std::string&) { return 1.2f * static_cast<float>(fs); };
  const LabelExtent across = [&lk](const std::string& s) { return static_cast<float>(lk.width(s, lk.fs)); };
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<AxisTick> yt;
  TokenAxis x_tokens, y_tokens;
  double y_tick_w = 0, left = 0, right = 0, plot_w = 0;
  // Tokens upright under the keys take a band of their own length: the map is shorter by what that adds, and
  // its y axis laid out again for the new height.
  for (int pass = 0; pass < 2; ++pass) {
    y_tokens = plot.y_tokens.empty() ? TokenAxis{} : token_axis(lk, plot.y_tokens, y0, y1, plot_h, true);
    yt = spaced_integer_ticks(y0, y1, plot_h, kLabelGapUpEm * fs, inf, tick_text, up);
    y_tick_w = 0;
    if (y_tokens.mode == TokenMode::Across) y_tick_w = y_tokens.band;
    else
      for (const AxisTick& t : yt)
        if (t.major) y_tick_w = std::max(y_tick_w, lk.width(t.label, fs));
    left = x + fs * 0.3 + y_label_w + y_tick_w + lk.tick_len + fs * 0.3;
    right = x + w - bar_w - fs * 0.6;
    plot_w = std::max(fs, right - left);
    x_tokens = plot.x_tokens.empty() ? TokenAxis{} : token_axis(lk, plot.x_tokens, x0, x1, plot_w, false);
    if (pass == 1 || x_tokens.mode != TokenMode::Upright) break;
    bottom -= x_tokens.band - fs * 1.3;
    plot_h = std::max(fs, bottom - top);
    if (bar_w > 0) bar_w = colorbar_width(lk, plot, plot_h);
  }
  const double x_band = x_tokens.mode == TokenMode::Upright ? x_tokens.band : fs * 1.3;
  auto px = [&](double v) { return left + (v - x0) / (x1 - x0) * plot_w; };
  auto py = [&](double v) { return top + (v - y0) / (y1 - y0) * plot_h; };  // row 0 at the top

  draw_title(lk, plot.title, x, y, w, left + plot_w / 2);
  lk.canvas.clip_begin(left, top, plot_w, plot_h);
  lk.canvas.rect(left, top, plot_w, plot_h, kNoAttentionColor, 1.0);  // beyond the map: nothing recorded
  if (!m.values.empty())
    lk.canvas.image(px(plot.x_origin), py(plot.y_origin), px(plot.x_origin + static_cast<double>(m.cols) * m.col_block) - px(plot.x_origin),
                    py(plot.y_origin + static_cast<double>(m.rows) * m.row_block) - py(plot.y_origin), map_image(plot));
  for (double xm : plot.marks_x) lk.canvas.line({px(xm), top}, {px(xm), top + plot_h}, Stroke{Rgba{255, 89, 77, 255}, lk.line_w()});
  lk.canvas.clip_end();
  lk.canvas.rect_outline(left, top, plot_w, plot_h, lk.spine);
  double below = bottom;
  if (marks) {
    // The key-mark strip under the map, one cell per key, as the window draws it.
    const int n = static_cast<int>(plot.column_marks.size());
    Image strip(n, 1, Rgba{255, 255, 255, 255});
    for (int c = 0; c < n; ++c) {
      const uint8_t v = plot.column_marks[c];
      if (v) strip.set(c, 0, v == 3 ? kNotYetColor : v == 2 ? kMerged : kEvicted);
    }
    lk.canvas.clip_begin(left, bottom + fs * 0.15, plot_w, strip_h - fs * 0.15);
    lk.canvas.image(px(plot.x_origin), bottom + fs * 0.15, px(plot.x_origin + n) - px(plot.x_origin), strip_h - fs * 0.15, strip);
    lk.canvas.clip_end();
    below += strip_h;
  }
  if (y_tokens.mode == TokenMode::Across) {
    for (int c = y_tokens.first; c <= y_tokens.last; ++c) {
      const double yy = py(c + 0.5);
      lk.canvas.line({left - lk.tick_len, yy}, {left, yy}, lk.tick);
      lk.text(left - lk.tick_len - fs * 0.3, yy + fs * 0.35, plot.y_tokens[static_cast<std::size_t>(c)], fs, 1.0);
    }
  } else {
    for (const AxisTick& t : yt) {
      if (!t.major) continue;
      const double yy = py(t.value);
      lk.canvas.line({left - lk.tick_len, yy}, {left, yy}, lk.tick);
      lk.text(left - lk.tick_len - fs * 0.3, yy + fs * 0.35, t.label, fs, 1.0);
    }
  }
  if (x_tokens.mode != TokenMode::Numbers) {
    for (int c = x_tokens.first; c <= x_tokens.last; ++c) {
      const double xx = px(c + 0.5);
      const std::string& token = plot.x_tokens[static_cast<std::size_t>(c)];
      lk.canvas.line({xx, below}, {xx, below + lk.tick_len}, lk.tick);
      if (x_tokens.mode == TokenMode::Across) lk.text(xx, below + lk.tick_len + fs * 1.05, token, fs, 0.5);
      else lk.text(xx + fs * 0.35, below + lk.tick_len + fs * 0.3, upright_token(lk, token), fs, 1.0, false, true);
    }
  } else {
    for (const AxisTick& t : spaced_integer_ticks(x0, x1, plot_w, kLabelGapAcrossEm * fs, 0.4 * fs, tick_text, across)) {
      if (!t.major) continue;
      const double xx = px(t.value);
      lk.canvas.line({xx, below}, {xx, below + lk.tick_len}, lk.tick);
      lk.text(xx, below + lk.tick_len + fs * 1.05, t.label, fs, 0.5);
    }
  }
  if (!plot.x_label.empty()) lk.text(left + plot_w / 2, below + lk.tick_len + x_band + fs * 1.1, plot.x_label, fs, 0.5);
  if (!plot.y_label.empty()) {
    std::string label = plot.y_label;
    if (lk.width(label, fs) > plot_h && label.find(" (") != std::string::npos) label = label.substr(0, label.find(" ("));
    lk.text(x + fs * 0.3 + fs, top + plot_h / 2, label, fs, 0.5, false, true);
  }
  double ly = y + h - legend_h + fs * 1.0;
  for (const auto& row : legend_rows) {
    double lx = x;  // the rows were wrapped against the part's whole width, so they start at its left edge
    for (const auto& e : row) {
      lk.canvas.rect(lx, ly - fs * 0.75, fs * 0.8, fs * 0.8, e.color, 1.0);
      lk.text(lx + fs * 1.1, ly, e.name, fs, 0.0);
      lx += lk.width(e.name, fs) + fs * 2.0;
    }
    ly += fs * 1.4;
  }
  if (bar_w > 0) draw_colorbar(lk, plot, right + fs * 0.2, top, plot_h);
  return {top, plot_h};
}

}  // namespace


void draw_figure_vector(VectorCanvas& canvas, const Figure& figure, const VectorOptions& options) {
  if (figure.empty()) throw Error("nothing to export: the figure '" + figure.title + "' has no plots");
  Look lk(canvas, options);
  // Maps drawn on the same scale (compare columns) share one colour bar at the right.
  std::map<std::string, int> counts;
  for (const auto& p : figure.parts)
    if (const auto* hp = std::get_if<HeatmapPlot>(&p))
      if (!colour_scale_key(*hp).empty()) ++counts[colour_scale_key(*hp)];
  std::vector<std::pair<std::string, const HeatmapPlot*>> shared;
  for (const auto& p : figure.parts)
    if (const auto* hp = std::get_if<HeatmapPlot>(&p)) {
      const std::string key = colour_scale_key(*hp);
      if (!key.empty() && counts[key] >= 2 &&
          std::none_of(shared.begin(), shared.end(), [&](const auto& s) { return s.first == key; }))
        shared.emplace_back(key, hp);
    }
  double reserve = 0;
  for (const auto& s : shared) reserve += colorbar_width(lk, *s.second, options.height * 0.6);
  const double area_w = options.width - reserve;
  const int per_row = parts_per_row(figure, options.width, lk.fs);
  const int rows = (static_cast<int>(figure.parts.size()) + per_row - 1) / per_row;
  const double cell_w = area_w / per_row, cell_h = options.height / rows;
  double bar_top = options.height, bar_bottom = 0;
  for (std::size_t i = 0; i < figure.parts.size(); ++i) {
    const double cx = cell_w * (i % per_row), cy = cell_h * (i / per_row);
    // The last part takes the rest of its row (a difference map beside its own colour bar needs the room).
    const double cell_w_here = i + 1 == figure.parts.size() ? area_w - cx : cell_w;
    if (const auto* lp = std::get_if<LinePlot>(&figure.parts[i])) {
      draw_line_part(lk, *lp, cx, cy, cell_w_here, cell_h);
    } else {
      const auto& hp = std::get<HeatmapPlot>(figure.parts[i]);
      const bool own = colour_scale_key(hp).empty() || counts[colour_scale_key(hp)] < 2;
      const auto [top, plot_h] = draw_heatmap_part(lk, hp, cx, cy, cell_w_here, cell_h, own);
      if (!own) bar_top = std::min(bar_top, top), bar_bottom = std::max(bar_bottom, top + plot_h);
    }
  }
  double bx = area_w;
  for (const auto& s : shared) {
    draw_colorbar(lk, *s.second, bx, bar_top, std::max(lk.fs, bar_bottom - bar_top), options.height * 0.6);
    bx += colorbar_width(lk, *s.second, options.height * 0.6);
  }
}

std::string figure_svg(const Figure& figure, const VectorOptions& options) {
  SvgCanvas canvas(options.width, options.height);
  draw_figure_vector(canvas, figure, options);
  return canvas.finish();
}

std::string figure_svg(const Figure& figure, int width, int height, float font_px) {
  VectorOptions o;
  o.width = width, o.height = height, o.font_px = font_px;
  return figure_svg(figure, o);
}

std::string figure_pdf(const Figure& figure, const VectorOptions& options) {
  PdfCanvas canvas(options.width, options.height, options.dpi);
  draw_figure_vector(canvas, figure, options);
  return canvas.finish();
}

}  // namespace kvscope::viewers
