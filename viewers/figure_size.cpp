#include "viewers/figure_size.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "core/common/error.h"
#include "viewers/font_metrics.h"

namespace kvscope::viewers {

namespace {

bool parse_number(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(out) && out > 0;
}

}  // namespace

FigureSize parse_figure_size(const std::string& text, double dpi) {
  FigureSize size;
  const std::string forms = "expected column (3.3 in wide), page (7 in), WIDTHxHEIGHT pixels (1200x800) or inches (3.3x2.5in)";
  if (text == "column" || text == "page") {
    size.width = static_cast<int>(std::lround((text == "column" ? kColumnInches : kPageInches) * dpi));
    size.height = static_cast<int>(std::lround(size.width * 0.75));
    size.auto_height = true;
    size.points = 9.0;
  } else {
    const bool inches = text.size() > 2 && text.compare(text.size() - 2, 2, "in") == 0;
    const std::string body = inches ? text.substr(0, text.size() - 2) : text;
    const auto x = body.find('x');
    double w = 0, h = 0;
    if (x == std::string::npos || !parse_number(body.substr(0, x), w) || !parse_number(body.substr(x + 1), h))
      throw UsageError("size '" + text + "': " + forms);
    if (!inches && (w != std::floor(w) || h != std::floor(h))) throw UsageError("size '" + text + "': pixels are whole numbers; " + forms);
    size.width = static_cast<int>(std::lround(inches ? w * dpi : w));
    size.height = static_cast<int>(std::lround(inches ? h * dpi : h));
    if (inches) size.points = 9.0;
  }
  if (size.width < 64 || size.height < 64 || size.width > 16384 || size.height > 16384)
    throw UsageError("size '" + text + "' is " + std::to_string(size.width) + "x" + std::to_string(size.height) +
                     " pixels at " + std::to_string(static_cast<int>(dpi)) + " dpi, out of range (64..16384 pixels per side)");
  return size;
}

double shared_colorbar_reserve(const Figure& figure, double font_px) {
  std::map<std::string, int> counts;
  for (const auto& p : figure.parts)
    if (const auto* hp = std::get_if<HeatmapPlot>(&p))
      if (!colour_scale_key(*hp).empty()) ++counts[colour_scale_key(*hp)];
  int shared = 0;
  for (const auto& [key, n] : counts) shared += n >= 2;
  return shared * kColorbarEm * font_px;
}

int parts_per_row(const Figure& figure, double width, double font_px) {
  const int n = static_cast<int>(figure.parts.size());
  if (n == 0) return 1;
  bool maps = false;
  for (const auto& p : figure.parts) maps |= std::holds_alternative<HeatmapPlot>(p);
  width -= shared_colorbar_reserve(figure, font_px);
  const double min_w = font_px * (maps ? 10.0 : 14.0);
  // More than three maps in a row leaves each too small beside its tick labels whatever the width.
  const int most = std::clamp(static_cast<int>(width / std::max(1.0, min_w)), 1, maps ? std::min(n, 3) : n);
  const int rows = (n + most - 1) / most;
  return (n + rows - 1) / rows;
}

int figure_height(const Figure& figure, int width, double font_px) {
  const int per_row = parts_per_row(figure, width, font_px);
  const int rows = (static_cast<int>(figure.parts.size()) + per_row - 1) / per_row;
  const double cell_w = (width - shared_colorbar_reserve(figure, font_px)) / per_row;
  double row_h = 0;
  for (const auto& p : figure.parts) {
    // Title, tick labels, axis label and a legend line around the data.
    const double around = font_px * 6.5;
    if (std::holds_alternative<HeatmapPlot>(p)) {
      row_h = std::max(row_h, cell_w * 0.8 + around);
      continue;
    }
    // A line plot's data keeps 4:3; category names turned upright and a legend under the data come on top
    // (figure_vector's layout: names upright when they do not fit across, the legend under the plot when it
    // would take more than 40 % of the width beside it).
    const auto& lp = std::get<LinePlot>(p);
    const FigureFont& font = figure_font();
    double extra = 0, widest_name = 0, widest_entry = 0;
    for (const auto& name : lp.x_tick_labels) widest_name = std::max(widest_name, font.text_width(name, font_px));
    if (!lp.x_tick_labels.empty() && widest_name + font_px * 0.5 > cell_w / lp.x_tick_labels.size())
      extra += std::min(widest_name, cell_w * 0.35);
    int entries = 0;
    for (const auto& s : lp.series)
      if (!s.name.empty() && s.name.rfind("##", 0) != 0)
        ++entries, widest_entry = std::max(widest_entry, font.text_width(s.name, font_px));
    if (entries && widest_entry + font_px * 3.2 > 0.4 * cell_w) extra += entries * font_px * 1.35 + font_px * 0.5;
    row_h = std::max(row_h, cell_w * 0.6 + around + extra);
  }
  return std::clamp(static_cast<int>(std::lround(row_h * rows)), 64, 16384);
}

}  // namespace kvscope::viewers
