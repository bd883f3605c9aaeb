#include "viewers/plot_readout.h"

#include <cmath>
#include <cstdio>

namespace kvscope::viewers {

std::vector<std::string> identical_to(const LinePlot& plot) {
  std::vector<std::string> out(plot.series.size());
  for (std::size_t i = 0; i < plot.series.size(); ++i)
    for (std::size_t j = 0; j < i && out[i].empty(); ++j) {
      const LineSeries &a = plot.series[i], &b = plot.series[j];
      // Bars side by side (grouped) never hide each other: their x differ by the group offset.
      if (a.kind == b.kind && !a.y.empty() && a.x == b.x && a.y == b.y) out[i] = b.name;
    }
  return out;
}

std::string legend_name(const LinePlot& plot, std::size_t i, const std::vector<std::string>& identical) {
  const std::string& name = plot.series.at(i).name;
  if (identical.at(i).empty()) return name;
  // ImGui hides what follows "##" (an id kept unique): the note goes before it, and names the other series by
  // what its legend shows.
  const std::size_t hidden = name.find("##");
  const std::string other = identical[i].substr(0, identical[i].find("##"));
  if (hidden == std::string::npos) return name + " (= " + other + ")";
  return name.substr(0, hidden) + " (= " + other + ")" + name.substr(hidden);
}

namespace {

std::string x_text(const LinePlot& plot, const LineSeries& s, std::size_t point) {
  const double x = s.x[point];
  const long nearest = std::lround(x);
  if (!plot.x_tick_labels.empty() && nearest >= 0 && nearest < static_cast<long>(plot.x_tick_labels.size()))
    return plot.x_tick_labels[nearest];
  char buf[48];
  // Grouped bars sit off their whole x by a fraction: name the whole x they stand for.
  if (s.kind == LineSeries::Kind::Bars || plot.integer_x) std::snprintf(buf, sizeof buf, "%ld", nearest);
  else std::snprintf(buf, sizeof buf, "%.4g", x);
  return (plot.x_label.empty() ? "" : plot.x_label + " ") + buf;
}

}  // namespace

std::optional<PlotReadout> readout_at(const LinePlot& plot, double x, double y, double x_units_per_px,
                                      double y_units_per_px, double radius_px) {
  std::optional<PlotReadout> best;
  // Strictly nearer replaces: of coinciding points the first drawn (the series the others repeat) answers.
  double best_d2 = radius_px * radius_px * (1 + 1e-9);
  for (std::size_t i = 0; i < plot.series.size() && !(best && plot.series[best->series].kind == LineSeries::Kind::Bars);
       ++i) {
    const LineSeries& s = plot.series[i];
    const std::size_t n = std::min(s.x.size(), s.y.size());
    for (std::size_t p = 0; p < n; ++p) {
      if (!std::isfinite(s.y[p])) continue;
      if (s.kind == LineSeries::Kind::Bars) {
        const double lo = std::min(0.0, s.y[p]), hi = std::max(0.0, s.y[p]);
        if (std::abs(x - s.x[p]) <= s.bar_width / 2 && y >= lo && y <= hi) {
          best = PlotReadout{i, p, ""};
          break;
        }
        continue;
      }
      const double dx = (s.x[p] - x) / x_units_per_px, dy = (s.y[p] - y) / y_units_per_px;
      if (dx * dx + dy * dy < best_d2) {
        best_d2 = dx * dx + dy * dy;
        best = PlotReadout{i, p, ""};
      }
    }
  }
  if (!best) return best;
  const LineSeries& s = plot.series[best->series];
  char value[48];
  std::snprintf(value, sizeof value, "%.4g", s.y[best->point]);
  // The series drawn at this very place: the one hit and every series identical to it.
  const std::vector<std::string> identical = identical_to(plot);
  std::string names = s.name;
  for (std::size_t i = best->series + 1; i < plot.series.size(); ++i)
    if (identical[i] == s.name) names += ", " + plot.series[i].name;
  best->text = names + ": " + x_text(plot, s, best->point) + ", " + value;
  return best;
}

}  // namespace kvscope::viewers
