// Read-outs of line and bar plots and coinciding series (viewers/plot_readout.h), on plots written out by hand.
#include <catch2/catch.hpp>

#include "viewers/plot_readout.h"

using namespace kvscope::viewers;

namespace {

LineSeries line(const std::string& name, std::vector<double> y) {
  LineSeries s;
  s.name = name;
  for (std::size_t i = 0; i < y.size(); ++i) s.x.push_back(static_cast<double>(i));
  s.y = std::move(y);
  return s;
}

}  // namespace

TEST_CASE("a series equal to an earlier one is named as such in the legend", "[viewers]") {
  LinePlot p;
  p.series = {line("full", {3, 2, 1}), line("snapkv", {3, 2, 1}), line("h2o", {3, 2, 1.5}), line("tova", {3, 2, 1})};
  const auto same = identical_to(p);
  CHECK(same == std::vector<std::string>{"", "full", "", "full"});
  CHECK(legend_name(p, 1, same) == "snapkv (= full)");
  CHECK(legend_name(p, 2, same) == "h2o");
  // Names with a hidden ImGui id: the note must stay in the visible part, naming the other series as shown.
  LinePlot ids;
  ids.series = {line("full##0", {1, 2}), line("snapkv##1", {1, 2})};
  CHECK(legend_name(ids, 1, identical_to(ids)) == "snapkv (= full)##1");
  // Bars of the same values side by side (grouped: offset x) hide nothing.
  LinePlot bars;
  LineSeries a = line("a", {5, 5}), b = line("b", {5, 5});
  a.kind = b.kind = LineSeries::Kind::Bars;
  b.x = {0.4, 1.4};
  bars.series = {a, b};
  CHECK(identical_to(bars) == std::vector<std::string>{"", ""});
}

TEST_CASE("the read-out names the point under the pointer", "[viewers]") {
  LinePlot p;
  p.x_label = "layer";
  p.integer_x = true;
  p.series = {line("full", {3, 2, 1}), line("snapkv", {3, 2, 1}), line("h2o", {3, 2, 1.5})};
  // 10 px per layer, 100 px per unit up: (2, 1.5) is h2o's last point; 3 px left and 4 px down is 5 px away.
  const double ux = 0.1, uy = 0.01;
  auto r = readout_at(p, 2 - 3 * ux, 1.5 - 4 * uy, ux, uy);
  REQUIRE(r.has_value());
  CHECK(r->series == 2);
  CHECK(r->point == 2);
  CHECK(r->text == "h2o: layer 2, 1.5");
  // On the coinciding lines: the first drawn answers and names the series identical to it.
  r = readout_at(p, 1, 2, ux, uy);
  REQUIRE(r.has_value());
  CHECK(r->text == "full, snapkv: layer 1, 2");
  r = readout_at(p, 2, 1, ux, uy);
  REQUIRE(r.has_value());
  CHECK(r->series == 0);
  CHECK(r->text == "full, snapkv: layer 2, 1");
  CHECK_FALSE(readout_at(p, 1.5, 2.5, ux, uy).has_value());  // 50 px from every point

  // Bars: inside the rectangle (x +- width / 2, 0..value), by category name when the axis has them.
  LinePlot bars;
  bars.x_tick_labels = {"snapkv", "h2o"};
  LineSeries b = line("kept", {40, 70});
  b.kind = LineSeries::Kind::Bars;
  b.bar_width = 0.8;
  bars.series = {b};
  r = readout_at(bars, 1.3, 60, ux, uy);
  REQUIRE(r.has_value());
  CHECK(r->text == "kept: h2o, 70");
  CHECK_FALSE(readout_at(bars, 1.3, 75, ux, uy).has_value());  // above the bar
  CHECK_FALSE(readout_at(bars, 0.5, 10, ux, uy).has_value());  // between the bars
}
