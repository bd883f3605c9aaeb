#pragma once
// What a line or bar plot says under the pointer, and which of its series coincide, without ImGui (issue 25):
// the Budgets, Layer stats and Summary plots had no read-out, and a series equal to another (runs with the same
// prefill have the same per-layer statistics) was drawn exactly under it, invisible.
#include <optional>
#include <string>
#include <vector>

#include "viewers/figure.h"

namespace kvscope::viewers {

// For each series, the name of an earlier series with the same kind, x and y (the one it hides), or "".
std::vector<std::string> identical_to(const LinePlot& plot);

// The legend name of series i: its name, with "(= NAME)" when it coincides with an earlier series.
std::string legend_name(const LinePlot& plot, std::size_t i, const std::vector<std::string>& identical);

struct PlotReadout {
  std::size_t series = 0, point = 0;
  std::string text;  // "kvmerger_b25pct, snapkv_b25pct: layer 3, 39" (every series drawn at that place)
};
// The point under plot coordinates (x, y): a bar whose rectangle holds it, else the nearest line point within
// radius_px (the plot's scale in units per pixel turns distances into pixels); nullopt when none. x_label names
// the x value ("layer 3"); categories name it by their tick label.
std::optional<PlotReadout> readout_at(const LinePlot& plot, double x, double y, double x_units_per_px,
                                      double y_units_per_px, double radius_px = 8.0);

}  // namespace kvscope::viewers
