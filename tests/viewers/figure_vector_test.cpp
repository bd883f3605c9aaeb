// Vector figures (SVG and PDF) read back as a reader would: bars measured against their values, names found as
// text, one colour bar for maps on one scale, maps as wide as a print size allows, a PDF whose cross-reference
// table points at its objects, and a quality plot that says when it has no intervals.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/eval/sweep_store.h"
#include "viewers/figure.h"
#include "viewers/figure_size.h"
#include "viewers/figure_vector.h"
#include "viewers/font_metrics.h"
#include "viewers/pareto_plot.h"
#include "viewers/quality_plot.h"
#include "viewers/views.h"

using namespace kvscope;
using namespace kvscope::viewers;

namespace {

struct SvgRect {
  double x, y, w, h;
  std::string fill;
};

// The data bars: rectangles filled at the bar opacity.
std::vector<SvgRect> bars(const std::string& svg) {
  std::vector<SvgRect> out;
  const std::regex re(R"re(<rect x="([-0-9.e]+)" y="([-0-9.e]+)" width="([-0-9.e]+)" height="([-0-9.e]+)" fill="(#[0-9a-f]{6})" fill-opacity="0.85"/>)re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back({std::stod((*it)[1]), std::stod((*it)[2]), std::stod((*it)[3]), std::stod((*it)[4]), (*it)[5]});
  return out;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t pos = 0; (pos = text.find(what, pos)) != std::string::npos; pos += what.size()) ++n;
  return n;
}

std::string hex(Rgba c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

// The Summary's two panels as it builds them: one bar per run, named, on category ticks.
Figure summary_like(const std::vector<std::string>& names, const std::vector<double>& kept,
                    const std::vector<double>& gap) {
  LinePlot share, diff;
  share.title = "Cache entries kept (entries, not bytes)";
  share.y_label = "% of the full cache";
  diff.title = "Mean log-prob gap to the full cache";
  diff.y_label = "nats per token";
  for (std::size_t i = 0; i < names.size(); ++i) {
    LineSeries a;
    a.name = names[i];
    a.kind = LineSeries::Kind::Bars;
    a.color = static_cast<int>(i);
    a.x = {static_cast<double>(i)};
    a.y = {kept[i]};
    share.series.push_back(a);
    share.x_tick_labels.push_back(names[i]);
    a.y = {gap[i]};
    diff.series.push_back(a);
    diff.x_tick_labels.push_back(names[i]);
  }
  Figure f;
  f.parts = {share, diff};
  return f;
}

HeatmapPlot map_of(const std::string& title, float scale_max, Colormap cmap) {
  HeatmapPlot p;
  p.title = title;
  p.x_label = "key position";
  p.y_label = "query position";
  p.colorbar_label = "attention";
  p.map.rows = p.map.cols = p.map.source_rows = p.map.source_cols = 64;
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 64; ++c) p.map.values.push_back(c <= r ? 0.01f * (1 + (r + c) % 7) : std::nanf(""));
  p.scale = {ScaleKind::Linear, 0.0f, scale_max};
  p.cmap = cmap;
  return p;
}

// A run of one layer and head whose prefill map is `scale` x a fixed causal pattern (its own colour range).
RunEntry synthetic_run(const std::string& name, float scale) {
  auto run = std::make_shared<trace::RunTrace>();
  run->name = name;
  run->n_layers = run->n_heads = run->n_kv_heads = 1;
  run->prompt_length = 32;
  run->prompt_ids.assign(32, 7);
  run->metadata["policy"] = name;
  auto m = std::make_shared<trace::Map2D>();
  m->rows = m->cols = m->source_rows = m->source_cols = 32;
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 32; ++c) m->values.push_back(c <= r ? scale * (1 + (r * 7 + c) % 5) / (r + 1.0f) : 0.0f);
  run->attention[{0, 0}] = m;
  RunEntry e;
  e.run = run;
  e.slot = name;
  e.source = "test";
  return e;
}

}  // namespace

TEST_CASE("compare columns share one colour range and one colour bar", "[figure]") {
  AppState state;
  state.runs = {synthetic_run("full", 1.0f), synthetic_run("snapkv_b25pct", 0.05f)};
  state.active = 0;
  ViewOptions o;
  o.runs = {"full", "snapkv_b25pct"};
  const Figure f = view_figure(state, "compare", o);
  REQUIRE(f.parts.size() == 3);  // two columns and their difference
  const auto& a = std::get<HeatmapPlot>(f.parts[0]);
  const auto& b = std::get<HeatmapPlot>(f.parts[1]);
  // Each column's own range would end at its own largest value, 20 times apart: the shared one covers both.
  CHECK(a.scale.vmax == b.scale.vmax);
  CHECK(a.scale.vmin == b.scale.vmin);
  CHECK(a.scale.vmax >= 1.0f);
  CHECK(colour_scale_key(a) == colour_scale_key(b));
  const std::string svg = figure_svg(f, 1400, 600, 14.0f);
  int colour_bars = 0;
  const std::regex re(R"re(<image x="[-0-9.e]+" y="[-0-9.e]+" width="([-0-9.e]+)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it)
    colour_bars += std::stod((*it)[1]) < 28;
  CHECK(colour_bars == 2);  // the columns' one, the difference's one
  CHECK(svg.find("full") != std::string::npos);
  CHECK(svg.find("snapkv_b25pct") != std::string::npos);
}

TEST_CASE("SVG bars stand on zero, negative ones below it, at the height their value gives", "[figure]") {
  const std::vector<std::string> names = {"full", "snapkv_b25pct", "h2o_b25pct", "cake_b25pct"};
  const std::vector<double> kept = {100.0, 25.0, 25.0, 26.0}, gap = {0.05, -0.299, 0.0138, -0.12};
  const std::string svg = figure_svg(summary_like(names, kept, gap), 1200, 500, 14.0f);
  const std::vector<SvgRect> r = bars(svg);
  REQUIRE(r.size() == 8);  // four runs, two panels, drawn in order
  for (int panel = 0; panel < 2; ++panel) {
    const std::vector<double>& v = panel == 0 ? kept : gap;
    // The zero line: the foot of a positive bar, the head of a negative one. One for the whole panel.
    const SvgRect& first = r[panel * 4];
    const double zero = v[0] > 0 ? first.y + first.h : first.y;
    const double per_unit = first.h / std::fabs(v[0]);
    for (int i = 0; i < 4; ++i) {
      const SvgRect& b = r[panel * 4 + i];
      INFO("panel " << panel << ", bar " << names[i] << " = " << v[i]);
      CHECK(b.fill == hex(series_color(i)));
      CHECK(b.h > 0);
      CHECK(b.h == Approx(std::fabs(v[i]) * per_unit).epsilon(1e-3));
      if (v[i] > 0) CHECK(b.y + b.h == Approx(zero).margin(0.01));
      else CHECK(b.y == Approx(zero).margin(0.01));
    }
  }
  // Every run is named twice a panel: under its bar and in the legend (a name turned upright is still text).
  for (const auto& n : names) {
    INFO(n);
    CHECK(count(svg, ">" + n + "</text>") == 4);
  }
}

TEST_CASE("maps on one colour scale share one colour bar, and keep a readable width at a page's width", "[figure]") {
  Figure f;
  const std::vector<std::string> runs = {"full", "snapkv_b25pct", "h2o_b25pct", "cake_b25pct"};
  for (const auto& r : runs) f.parts.push_back(map_of(r + " layer 14, head 0", 0.08f, Colormap::Viridis));
  f.parts.push_back(map_of("snapkv_b25pct - full", 0.02f, Colormap::RdBu));
  VectorOptions o;
  o.dpi = 300;
  o.font_px = 9 * 300 / 72.0;
  o.width = kPageInches * 300;
  o.height = figure_height(f, static_cast<int>(o.width), o.font_px);
  const std::string svg = figure_svg(f, o);
  // Pictures: five maps and the colour bars (a bar is one em wide).
  const std::regex re(R"re(<image x="([-0-9.e]+)" y="([-0-9.e]+)" width="([-0-9.e]+)" height="([-0-9.e]+)")re");
  int colour_bars = 0, maps = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it) {
    const double w = std::stod((*it)[3]);
    if (w < 2 * o.font_px) {
      ++colour_bars;
    } else {
      ++maps;
      // At 7 in, a run's map is at least 1.26 in wide (it was 60 px of 1200); the difference, beside its own colour
      // bar, at least 0.7 in.
      INFO("map " << maps);
      CHECK(w >= (maps <= 4 ? 0.18 : 0.1) * o.width);
    }
  }
  CHECK(maps == 5);
  CHECK(colour_bars == 2);  // one for the four runs, one for the difference
  // Titles are whole, wrapped into lines if need be: each run name appears as text in full.
  for (const auto& r : runs) CHECK(svg.find(r) != std::string::npos);
  // At a column's width the five maps wrap into rows rather than shrink.
  CHECK(parts_per_row(f, kColumnInches * 300, o.font_px) <= 2);
}

TEST_CASE("a PDF export is a well-formed file whose page is the figure's size in points", "[figure]") {
  Figure f = summary_like({"full", "h2o_b25pct"}, {100, 25}, {0.0, -0.2});
  f.parts.push_back(map_of("full layer 0, head 0", 0.08f, Colormap::Viridis));
  VectorOptions o;
  o.width = 990, o.height = 700, o.dpi = 300, o.font_px = 37.5;
  const std::string pdf = figure_pdf(f, o);
  REQUIRE(pdf.rfind("%PDF-1.4", 0) == 0);
  CHECK(pdf.find("/MediaBox [0 0 237.6 168]") != std::string::npos);  // 3.3 in x 2.33 in
  CHECK(pdf.find("/Subtype /Image") != std::string::npos);
  if (figure_font().loaded()) CHECK(pdf.find("/FontFile2") != std::string::npos);  // DejaVu Sans, embedded
  // The cross-reference table: each offset is where its object starts.
  const std::size_t xref = std::stoul(pdf.substr(pdf.rfind("startxref") + 10));
  REQUIRE(pdf.compare(xref, 4, "xref") == 0);
  const int n = std::stoi(pdf.substr(xref + 7));
  for (int i = 1; i < n; ++i) {
    const std::size_t off = std::stoul(pdf.substr(xref + 7 + std::to_string(n).size() + 1 + 20 * i, 10));
    INFO("object " << i);
    CHECK(pdf.compare(off, std::to_string(i).size() + 6, std::to_string(i) + " 0 obj") == 0);
  }
  CHECK(pdf.substr(pdf.size() - 6) == "%%EOF\n");
}

TEST_CASE("a quality plot over one prompt says it has no intervals and draws markers and no bands", "[figure]") {
  std::vector<eval::SweepRow> rows;
  std::size_t cell = 0;
  // h2o and cake both at 1.0 at 50 %: the two curves meet there.
  for (const char* budget : {"10%", "25%", "50%"})
    for (const char* policy : {"h2o", "cake"}) {
      eval::SweepRow r;
      r.cell = cell++, r.prompt = "a", r.policy = policy, r.budget = budget;
      const bool top = std::string(budget) == "50%";
      r.metrics = {{"top1_agreement", top ? 1.0 : std::string(policy) == "h2o" ? 0.6 : 0.7}};
      rows.push_back(r);
    }
  const Figure f = quality_vs_budget(rows, {"h2o", "cake"}, {"10%", "25%", "50%"}, "top1_agreement", "quality");
  const LinePlot& plot = std::get<LinePlot>(f.parts.front());
  CHECK(plot.title.find("no intervals") != std::string::npos);
  CHECK(plot.title.find("bands") == std::string::npos);
  const std::string svg = figure_svg(f, 900, 500, 14.0f);
  CHECK(count(svg, "<polygon") == 0);  // no band
  // Markers: h2o's circles and cake's squares (closed paths of five points), both visible where they meet.
  CHECK(count(svg, "<circle") >= 3 + 1);  // three points and the legend's sample
  const std::regex square(R"re(<path d="M[-0-9.e]+,[-0-9.e]+ (L[-0-9.e]+,[-0-9.e]+ ){4}")re");
  CHECK(std::distance(std::sregex_iterator(svg.begin(), svg.end(), square), std::sregex_iterator()) >= 3);
  // The legend sits right of the plot frame: its frame starts past the frame's right edge.
  const std::regex frame(R"re(<rect x="([-0-9.e]+)" y="[-0-9.e]+" width="([-0-9.e]+)" height="[-0-9.e]+" fill="none" stroke="#333333")re");
  std::smatch m;
  REQUIRE(std::regex_search(svg, m, frame));
  const double plot_right = std::stod(m[1]) + std::stod(m[2]);
  const std::regex legend(R"re(<rect x="([-0-9.e]+)" y="[-0-9.e]+" width="[-0-9.e]+" height="[-0-9.e]+" fill="none" stroke="#cccccc")re");
  REQUIRE(std::regex_search(svg, m, legend));
  CHECK(std::stod(m[1]) >= plot_right);
}

TEST_CASE("the Pareto front's marks have a colour of their own however many curves there are", "[figure][pareto]") {
  // Ten curves fill the palette: a front coloured by the next palette index took the first curve's colour.
  ParetoView view;
  view.metric = "kl_mean";
  view.bytes_metric = "cache_bytes";
  for (int s = 0; s < 10; ++s) {
    ParetoPoint p;
    p.series = "policy" + std::to_string(s);
    p.budget = "50%";
    p.bytes = 1e6 * (s + 1);
    p.quality = 1.0 / (s + 1);
    p.on_front = true;
    view.points.push_back(p);
  }
  const Figure f = pareto_figure(view, "fidelity");
  const auto& plot = std::get<LinePlot>(f.parts.at(0));
  REQUIRE(plot.series.size() == 11);
  const LineSeries& front = plot.series.back();
  CHECK(front.name == "Pareto front");
  for (FigureLook look : {FigureLook::Kvscope, FigureLook::Matplotlib}) {
    const Rgba ink = look_series_color(look, front.color);
    for (std::size_t s = 0; s + 1 < plot.series.size(); ++s) {
      const Rgba curve = look_series_color(look, plot.series[s].color != -1 ? plot.series[s].color : static_cast<int>(s));
      CHECK_FALSE((ink.r == curve.r && ink.g == curve.g && ink.b == curve.b));
    }
  }
}

namespace {

// A marker as drawn: "circle", or a closed path's outline as the directions of its sides (a square goes right, down,
// left, up; a triangle pointing up right-down, left, right-up), whatever its size and place.
std::string marker_shape(const std::string& element) {
  if (element.rfind("<circle", 0) == 0) return "circle";
  const std::regex point(R"re([ML]([-0-9.e]+),([-0-9.e]+))re");
  std::vector<std::pair<double, double>> p;
  for (auto it = std::sregex_iterator(element.begin(), element.end(), point); it != std::sregex_iterator(); ++it)
    p.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  auto sign = [](double d) { return std::fabs(d) < 1e-6 ? '0' : d > 0 ? '+' : '-'; };
  std::string out;
  for (std::size_t i = 1; i < p.size(); ++i) out += {sign(p[i].first - p[i - 1].first), sign(p[i].second - p[i - 1].second), ' '};
  return out;
}

struct LegendStyle {
  std::string colour, dash, marker;
  auto key() const { return std::tie(colour, dash, marker); }
  bool operator<(const LegendStyle& o) const { return key() < o.key(); }
};

// Each legend entry of an SVG: its name and the (colour, dash pattern, marker shape) its sample is drawn in.
std::map<std::string, LegendStyle> legend_styles(const std::string& svg) {
  std::map<std::string, LegendStyle> out;
  const std::regex entry(
      R"re(<line [^>]*stroke="(#[0-9a-f]{6})" stroke-width="[-0-9.e]+"(?: stroke-dasharray="([^"]*)")?/>\n(<circle [^>]*/>|<path d="[^"]*"[^>]*/>)\n<text [^>]*>([^<]*)</text>)re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), entry); it != std::sregex_iterator(); ++it)
    out[(*it)[4]] = {(*it)[1], (*it)[2], marker_shape((*it)[3])};
  return out;
}

}  // namespace

TEST_CASE("sixteen series are drawn in sixteen different styles, a sweep's by policy colour and cache type marker",
          "[figure][pareto]") {
  // 4 policies x 4 cache types: past the palette's ten colours, curves took the colour and marker of the curve ten
  // before them.
  const std::vector<std::string> policies = {"h2o", "snapkv", "tova", "streaming_llm"};
  const std::vector<std::string> types = {"f16", "q8_0", "q4_0", "kivi2"};
  std::vector<eval::SweepRow> rows;
  std::size_t cell = 0;
  for (std::size_t p = 0; p < policies.size(); ++p)
    for (std::size_t t = 0; t < types.size(); ++t)
      for (const char* budget : {"25%", "50%"}) {
        eval::SweepRow r;
        r.cell = cell++, r.prompt = "a", r.policy = policies[p], r.cache_type = types[t], r.budget = budget;
        const double share = std::string(budget) == "25%" ? 0.25 : 0.5;
        r.metrics = {{"kl_mean", 0.1 * (p + 1) / share + 0.01 * t}, {"cache_bytes", 1e6 * share / (t + 1)}};
        rows.push_back(r);
      }
  const ParetoView view = pareto_points(rows, "kl_mean");
  const std::string svg = figure_svg(pareto_figure(view, "fidelity"), 1400, 900, 14.0f);
  const auto legend = legend_styles(svg);
  std::set<LegendStyle> distinct;
  for (const auto& policy : policies)
    for (const auto& type : types) {
      const std::string name = policy + " @" + type;
      INFO(name);
      REQUIRE(legend.count(name) == 1);
      distinct.insert(legend.at(name));
      // The encoding a reader decodes: a policy's colour over its cache types, a cache type's marker and dash over
      // its policies.
      CHECK(legend.at(name).colour == legend.at(policy + " @" + types[0]).colour);
      CHECK(legend.at(name).marker == legend.at(policies[0] + " @" + type).marker);
      CHECK(legend.at(name).dash == legend.at(policies[0] + " @" + type).dash);
    }
  CHECK(distinct.size() == 16);
  // Curves of one colour or one marker are not all drawn solid: the cache types' dashes reach the data too.
  CHECK(count(svg, "stroke-dasharray") >= 3 * 4 * 2);

  // Sixteen plain series (no cache types): the palette's colours, then again with other markers and dashes.
  LinePlot plain;
  for (int s = 0; s < 16; ++s) {
    LineSeries line;
    line.name = "series " + std::to_string(s);
    line.x = {0.0, 1.0, 2.0};
    line.y = {1.0 * s, 1.0 * s + 1, 1.0 * s + 0.5};
    plain.series.push_back(line);
  }
  Figure f;
  f.parts.emplace_back(plain);
  const auto plain_legend = legend_styles(figure_svg(f, 1400, 900, 14.0f));
  std::set<LegendStyle> plain_distinct;
  for (const auto& [name, style] : plain_legend) plain_distinct.insert(style);
  CHECK(plain_legend.size() == 16);
  CHECK(plain_distinct.size() == 16);
}

TEST_CASE("every vertical label of an exported compare figure is whole at a column's and a page's width", "[figure]") {
  // The compare view's five parts as the window exports them: four runs on one scale, and their difference with its
  // own colour bar, a two-line title and the decode steps. At --size column the difference's bar was shorter than
  // its title, which was cut to "attention differ"; it now goes on a second line beside the first.
  Figure f;
  for (const std::string r : {"full", "cake_b25pct", "h2o_b25pct", "snapkv_b25pct"}) f.parts.push_back(map_of(r + " L0 H0", 0.08f, Colormap::Viridis));
  HeatmapPlot diff = map_of("cake_b25pct - full (decode; prefill maps identical)", 0.1f, Colormap::RdBu);
  diff.y_label = "decode step";
  diff.colorbar_label = "attention difference";
  diff.map.rows = diff.map.source_rows = 16;
  diff.map.values.resize(16 * 64, 0.01f);
  f.parts.push_back(diff);
  const std::set<std::string> whole = {"query position", "decode step", "attention", "attention difference", "difference"};
  const std::regex upright(R"re(<text transform="translate\([^)]*\) rotate\(-90\)"[^>]*>([^<]*)</text>)re");
  for (const double inches : {kColumnInches, kPageInches}) {
    INFO(inches << " in");
    VectorOptions o;
    o.dpi = 300;
    o.font_px = 9 * 300 / 72.0;
    o.width = inches * 300;
    o.height = figure_height(f, static_cast<int>(o.width), o.font_px);
    const std::string svg = figure_svg(f, o);
    std::vector<std::string> labels;
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), upright); it != std::sregex_iterator(); ++it)
      labels.push_back((*it)[1]);
    CAPTURE(labels);
    for (const auto& l : labels) CHECK(whole.count(l) == 1);
    // The difference's bar title: whole on one line, or on two, "attention" then "difference".
    const auto at = std::find(labels.begin(), labels.end(), "difference");
    CHECK((std::count(labels.begin(), labels.end(), "attention difference") == 1 ||
           (at != labels.end() && at != labels.begin() && *(at - 1) == "attention")));
    CHECK(std::count(labels.begin(), labels.end(), "decode step") == 1);
    CHECK(std::count(labels.begin(), labels.end(), "query position") == 4);
  }
}
