// Headless figures: the offscreen ImGui/ImPlot context plus the software rasteriser must produce the
// colours the colormap defines, and SVG output must carry the plot's text and data.
#include <catch2/catch.hpp>

#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "core/common/error.h"
#include "viewers/axis_ticks.h"
#include "viewers/figure.h"
#include "viewers/figure_export.h"
#include "viewers/figure_vector.h"
#include "viewers/font_metrics.h"
#include "viewers/soft_render.h"

using namespace kvscope;
using namespace kvscope::viewers;

namespace {

HeatmapPlot constant_heatmap(float value) {
  HeatmapPlot p;
  p.title = "constant";
  p.x_label = "key position";
  p.y_label = "query position";
  p.map.rows = p.map.source_rows = 8;
  p.map.cols = p.map.source_cols = 8;
  p.map.values.assign(64, value);
  p.scale = {ScaleKind::Linear, 0.0f, 1.0f};
  p.cmap = Colormap::Viridis;
  p.signature = "constant";
  return p;
}

int color_distance(Rgba a, Rgba b) { return std::abs(a.r - b.r) + std::abs(a.g - b.g) + std::abs(a.b - b.b); }

}  // namespace

namespace {

// A fixed-pitch stand-in for a font: 8 px per character across, 14 px up.
const LabelExtent kAcross = [](const std::string& s) { return 8.0f * static_cast<float>(s.size()); };
const LabelExtent kUp = [](const std::string&) { return 14.0f; };

// The labelled values, rounded to 12 significant digits so 3 * 0.005 compares equal to 0.015.
std::vector<double> labelled(const std::vector<AxisTick>& ticks) {
  std::vector<double> out;
  for (const auto& t : ticks)
    if (t.major && !t.label.empty()) out.push_back(std::stod(tick_text(t.value)));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("integer axes (steps, layers, positions) tick whole numbers only", "[figure]") {
  // 0..3 over 300 px: linear ticks would step by 0.2 (one-character labels 8 px wide, 20 px apart fit at 20 px);
  // an axis of steps keeps 0, 1, 2, 3 and no tick between them.
  const auto linear = spaced_linear_ticks(0, 3, 300, 6, 5, tick_text, kAcross);
  REQUIRE(labelled(linear).size() > 4);  // the case this guards: fractional labels on a short axis
  const auto integer = spaced_integer_ticks(0, 3, 300, 6, 5, tick_text, kAcross);
  CHECK(labelled(integer) == std::vector<double>{0, 1, 2, 3});
  for (const auto& t : integer) CHECK(t.value == std::round(t.value));
  // A long axis is unchanged: its round steps are whole numbers already.
  CHECK(labelled(spaced_integer_ticks(0, 160, 300, 6, 5, tick_text, kAcross)) ==
        labelled(spaced_linear_ticks(0, 160, 300, 6, 5, tick_text, kAcross)));
}

TEST_CASE("tick steps come from the label widths: the finest round step whose labels stay apart", "[figure]") {
  // 0..160 over 300 px: a step of 10 puts "90" and "100" 18.75 px apart, less than 8 + 12 + 6; a step of
  // 20 leaves 37.5 px for at most "100" and "120": 12 + 12 + 6. "160" would end 12 px past the axis end,
  // more than the 5 px allowed, so its tick stays unlabelled.
  CHECK(labelled(spaced_linear_ticks(0, 160, 300, 6, 5, tick_text, kAcross)) ==
        std::vector<double>{0, 20, 40, 60, 80, 100, 120, 140});
  // The same axis over 120 px: 20 leaves 15 px, 50 leaves 37.5 px ("150" ends 4.5 px past the end, inside 5).
  CHECK(labelled(spaced_linear_ticks(0, 160, 120, 6, 5, tick_text, kAcross)) == std::vector<double>{0, 50, 100, 150});
  // No overhang allowed: "150" (112.5 +- 12) would end past 120, and "0" starts 4 px before the axis.
  CHECK(labelled(spaced_linear_ticks(0, 160, 120, 6, 0, tick_text, kAcross)) == std::vector<double>{50, 100});
  // Minors fall between majors, without labels: every 5 (a step of 2 x 10^k is cut in quarters).
  const auto with_minors = spaced_linear_ticks(0, 160, 300, 6, 5, tick_text, kAcross);
  CHECK(std::count_if(with_minors.begin(), with_minors.end(), [](const AxisTick& t) { return !t.major; }) == 24);
  // A vertical axis: 14 px labels need 20 px between ticks; 0.021 - -0.013 over 200 px puts 0.005 at 29 px.
  CHECK(labelled(spaced_linear_ticks(-0.013, 0.021, 200, 6, 1e9, tick_text, kUp)) ==
        std::vector<double>{-0.01, -0.005, 0, 0.005, 0.01, 0.015, 0.02});
  // Log: seven decades over 100 px, 14 px labels: one decade is 14.3 px (< 20), every second 28.6 px.
  CHECK(labelled(spaced_log_ticks(1e-5, 100, 100, 6, 1e9, tick_text, kUp)) == std::vector<double>{1e-4, 1e-2, 1, 100});
  // Categories: twelve 10-character names over 400 px (33 px apart): every fifth, 167 px apart.
  std::vector<std::string> names(12, "policy_b25");
  CHECK(labelled(spaced_category_ticks(-0.5, 11.5, 400, 6, 1e9, names, kAcross)) == std::vector<double>{0, 5, 10});
  // Too short for two labels: one remains. Empty or inverted ranges have none.
  CHECK(labelled(spaced_linear_ticks(0, 160, 30, 6, 5, tick_text, kAcross)).size() == 1);
  CHECK(spaced_linear_ticks(1, 1, 300, 6, 5, tick_text, kAcross).empty());
  CHECK(spaced_log_ticks(-1, 10, 300, 6, 5, tick_text, kAcross).empty());
  // Zoomed in so far from zero that multiples of the fine steps are not distinct doubles: those steps
  // are skipped (no hang), and 1e17 itself, a multiple of 100, is the one tick.
  CHECK(labelled(spaced_linear_ticks(1e17, 1e17 + 64, 300, 6, 1e9, tick_text, kAcross)) == std::vector<double>{1e17});
}

TEST_CASE("a heatmap renders headless in the colormap's colour, with text around it", "[figure]") {
  Figure f;
  f.title = "test";
  f.parts.push_back(constant_heatmap(0.5f));
  FigureRenderer renderer;
  const Image img = renderer.render(f, ExportOptions{640, 480, 14.0f, false});
  REQUIRE(img.width == 640);
  REQUIRE(img.height == 480);
  // The map fills the middle of the plot area (left of the colourbar): its centre is viridis(0.5).
  const Rgba want = sample_colormap(Colormap::Viridis, 0.5f);
  int hits = 0;
  for (int y = 150; y < 330; y += 10)
    for (int x = 150; x < 400; x += 10) hits += color_distance(img.at(x, y), want) <= 3;
  CHECK(hits > 300);
  // Title, labels, ticks and the colourbar add many more colours (anti-aliased text, gradient).
  CHECK(img.distinct_colors() > 60);
  // White paper: the corners are the light style's window background.
  CHECK(img.at(2, 2).r > 200);
  // Rendering twice gives the same picture (no state leaks between figures).
  const Image again = renderer.render(f, ExportOptions{640, 480, 14.0f, false});
  CHECK(again.rgba == img.rgba);
}

TEST_CASE("the rasteriser blends a translucent quad without a seam on its diagonal", "[figure]") {
  ImGuiContext* ctx = ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.DisplaySize = ImVec2(32, 32);
  io.BackendFlags |= ImGuiBackendFlags_RendererHasTextures;
  io.IniFilename = nullptr;
  ImGui::NewFrame();
  ImDrawList* dl = ImGui::GetForegroundDrawList();
  dl->AddRectFilled(ImVec2(4, 4), ImVec2(28, 28), IM_COL32(255, 0, 0, 128));
  ImGui::Render();
  ImDrawData* dd = ImGui::GetDrawData();
  acknowledge_texture_requests(*dd);
  Image img(32, 32, {0, 0, 255, 255});
  SoftTextureStore textures;
  rasterize(*dd, textures, img);
  // 50% red over blue everywhere inside, exactly once (a double blend would give 75% red).
  for (int y = 4; y < 28; ++y)
    for (int x = 4; x < 28; ++x) {
      const Rgba c = img.at(x, y);
      CHECK(std::abs(c.r - 128) <= 1);
      CHECK(std::abs(c.b - 127) <= 1);
    }
  CHECK(img.at(2, 2) == (Rgba{0, 0, 255, 255}));
  CHECK(img.at(28, 28) == (Rgba{0, 0, 255, 255}));
  ImGui::DestroyContext(ctx);
}

TEST_CASE("line plots and heatmaps export to SVG", "[figure]") {
  LinePlot p;
  p.title = "entropy <per> layer";
  p.x_label = "layer";
  p.y_label = "nats";
  LineSeries s;
  s.name = "h2o_b64";
  s.x = {0, 1, 2};
  s.y = {1.0, 2.5, std::nan("")};
  p.series.push_back(s);
  LineSeries b;
  b.name = "budget";
  b.kind = LineSeries::Kind::Bars;
  b.x = {0, 1, 2};
  b.y = {4, 5, 6};
  p.series.push_back(b);
  Figure f;
  f.parts.push_back(p);
  const std::string svg = figure_svg(f, 800, 500);
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(svg.find("entropy &lt;per&gt; layer") != std::string::npos);
  CHECK(svg.find("h2o_b64") != std::string::npos);
  CHECK(svg.find("<path d=\"M") != std::string::npos);
  // Three bars and the plot frame.
  std::size_t rects = 0;
  for (std::size_t pos = 0; (pos = svg.find("<rect x=", pos)) != std::string::npos; ++pos) ++rects;
  CHECK(rects >= 4);
  Figure h;
  h.parts.push_back(constant_heatmap(0.1f));
  CHECK(figure_svg(h, 800, 500).find("<image") != std::string::npos);  // the map, embedded as a picture

  const auto dir = std::filesystem::temp_directory_path() / "kvscope_figure_test";
  std::filesystem::create_directories(dir);
  export_figure(f, (dir / "lines.svg").string(), ExportOptions{}, Existing::Replace);
  export_figure(h, (dir / "map.png").string(), ExportOptions{320, 240, 0.0f, false}, Existing::Replace);
  CHECK(std::filesystem::file_size(dir / "lines.svg") > 500);
  std::ifstream png(dir / "map.png", std::ios::binary);
  char magic[8] = {};
  png.read(magic, 8);
  CHECK(std::string(magic + 1, 3) == "PNG");
  CHECK_THROWS_AS(export_figure(f, (dir / "x.jpg").string(), ExportOptions{}, Existing::Replace), UsageError);
  std::filesystem::remove_all(dir);
}

namespace {

HeatmapPlot square_heatmap(int n) {
  HeatmapPlot p = constant_heatmap(0.5f);
  p.title = "L3 H1";
  p.map.rows = p.map.cols = std::min(n, 64);
  p.map.source_rows = p.map.source_cols = n;
  p.map.row_block = p.map.col_block = (n + 63) / 64;
  p.map.values.assign(static_cast<std::size_t>(p.map.rows) * p.map.cols, 0.5f);
  p.column_marks.assign(n, 0);
  p.column_marks[n / 2] = 1;  // the evicted-key strip stretches the y range past a round number
  p.signature = "square" + std::to_string(n);
  return p;
}

LinePlot line_plot(double x0, double x1, double y0, double y1, bool log_y, int categories) {
  LinePlot p;
  p.title = "entropy";
  p.x_label = "layer";
  p.y_label = "nats";
  p.log_y = log_y;
  LineSeries s;
  s.name = "h2o_b64";
  s.kind = categories > 0 ? LineSeries::Kind::Bars : LineSeries::Kind::Line;
  const int n = categories > 0 ? categories : 40;
  for (int i = 0; i < n; ++i) {
    s.x.push_back(categories > 0 ? i : x0 + (x1 - x0) * i / (n - 1));
    s.y.push_back(log_y ? y0 * std::pow(y1 / y0, i / (n - 1.0)) : y0 + (y1 - y0) * i / (n - 1));
  }
  for (int i = 0; i < categories; ++i) p.x_tick_labels.push_back("snapkv_b" + std::to_string(5 * i + 5) + "%");
  p.series.push_back(s);
  return p;
}

bool intersect(const TickLabelBox& a, const TickLabelBox& b) {
  return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
}

}  // namespace

TEST_CASE("exported tick labels never overlap at any size, and long axes keep at least two", "[figure]") {
  // Panels as the views export them: one to four maps side by side (the compare view), line plots over
  // small, signed and logarithmic ranges, and bar plots over named categories.
  std::vector<std::pair<std::string, Figure>> figures;
  for (int parts : {1, 3, 4})
    for (int n : {8, 160, 948, 32768}) {
      Figure f;
      for (int i = 0; i < parts; ++i) f.parts.push_back(square_heatmap(n));
      figures.emplace_back(std::to_string(parts) + " maps of " + std::to_string(n), f);
    }
  {
    Figure f;
    f.parts.push_back(line_plot(0, 29, -0.013, 0.021, false, 0));
    f.parts.push_back(line_plot(3, 97, 1e-5, 3.0, true, 0));
    f.parts.push_back(line_plot(0, 0, 0, 250000, false, 14));
    figures.emplace_back("lines and bars", f);
  }
  FigureRenderer renderer;  // one renderer for every figure: no plot of an earlier render may leak in
  for (const auto& [width, height] :
       std::vector<std::pair<int, int>>{{480, 320}, {800, 300}, {1200, 800}, {1000, 1400}, {2400, 900}}) {
    for (const auto& [name, figure] : figures) {
      INFO(name << " at " << width << "x" << height);
      const float font = std::max(13.0f, std::round(height / 50.0f));
      // Below this share of the width a part is too narrow to be worth checking (and no export makes it).
      if (width / static_cast<int>(figure.parts.size()) < 12 * font) continue;
      // The layout is the render's without the pixels (one figure is rasterised too, to be sure).
      if (width == 1200 && name == "3 maps of 160")
        renderer.render(figure, ExportOptions{width, height, 0.0f, false});
      else
        renderer.lay_out(figure, ExportOptions{width, height, 0.0f, false});
      const std::vector<TickLabelBox> boxes = renderer.tick_labels();
      for (std::size_t i = 0; i < boxes.size(); ++i)
        for (std::size_t j = i + 1; j < boxes.size(); ++j) {
          INFO("'" << boxes[i].text << "' [" << boxes[i].x0 << ", " << boxes[i].x1 << "] x [" << boxes[i].y0 << ", "
                   << boxes[i].y1 << "] and '" << boxes[j].text << "' [" << boxes[j].x0 << ", " << boxes[j].x1
                   << "] x [" << boxes[j].y0 << ", " << boxes[j].y1 << "]");
          CHECK_FALSE(intersect(boxes[i], boxes[j]));
        }
      // Every axis of every part is labelled, with two labels or more wherever six labels and their gaps
      // would fit along it.
      std::map<int, std::vector<const TickLabelBox*>> by_axis;
      for (const auto& b : boxes) by_axis[b.axis].push_back(&b);
      // (A category axis narrower than one name rightly has none, so the small line figures are spared.)
      if (width / static_cast<int>(figure.parts.size()) >= 300) CHECK(by_axis.size() == 2 * figure.parts.size());
      for (const auto& [axis, labels] : by_axis) {
        float widest = 0;
        for (const auto* b : labels) widest = std::max(widest, b->vertical ? b->y1 - b->y0 : b->x1 - b->x0);
        const double gap = font * (labels.front()->vertical ? kLabelGapUpEm : kLabelGapAcrossEm);
        INFO("axis " << axis << " (" << (labels.front()->vertical ? "y" : "x") << ", " << labels.front()->axis_pixels
                     << " px): " << labels.size() << " labels, the widest " << widest << " px");
        if (labels.front()->axis_pixels >= 6 * (widest + gap)) CHECK(labels.size() >= 2);
      }
    }
  }
}

TEST_CASE("an SVG legend names a series drawn over an identical one, as the window does", "[figure]") {
  LinePlot p;
  p.title = "entropy";
  LineSeries a;
  a.name = "full";
  a.x = {0, 1, 2};
  a.y = {1.0, 2.0, 1.5};
  LineSeries b = a;
  b.name = "snapkv_b25pct##live";
  p.series = {a, b};
  Figure f;
  f.parts.push_back(p);
  const std::string svg = figure_svg(f, 800, 500);
  const std::size_t entry = svg.find(">snapkv_b25pct (= full)</text>");
  REQUIRE(entry != std::string::npos);
  // The legend is as wide as its longest name: that name ends inside the figure (it once ran past the edge).
  const std::size_t x_at = svg.rfind("<text x=\"", entry);
  REQUIRE(x_at != std::string::npos);
  const double x = std::stod(svg.substr(x_at + 9));
  const float font = 14.0f;  // figure_svg's default
  CHECK(x + figure_font().text_width("snapkv_b25pct (= full)", font) <= 800);  // at the width a viewer draws it
  CHECK(svg.find("##") == std::string::npos);
  // Hollow squares (closed paths of five points) on the covering series' points, and one in its legend entry.
  const std::regex square(R"re(<path d="M[-0-9.e]+,[-0-9.e]+ (L[-0-9.e]+,[-0-9.e]+ ){4}")re");
  CHECK(std::distance(std::sregex_iterator(svg.begin(), svg.end(), square), std::sregex_iterator()) == 4);
}

namespace {

// Draws one plot in a bare ImGui/ImPlot context for `frames` frames and returns the limits ImPlot shows in the
// last one. `before` runs ahead of each frame's plot (a test asks for a fit there, as a double-click does).
struct PlotFrames {
  ImGuiContext* imgui = ImGui::CreateContext();
  ImPlotContext* implot = ImPlot::CreateContext();
  SoftTextureStore textures;
  PlotFrames() {
    ImGuiIO& io = ImGui::GetIO();
    io.DisplaySize = ImVec2(640, 480);
    io.DeltaTime = 1.0f / 60.0f;
    io.IniFilename = nullptr;
    io.BackendFlags |= ImGuiBackendFlags_RendererHasTextures;
  }
  ~PlotFrames() {
    ImPlot::DestroyContext(implot);
    ImGui::DestroyContext(imgui);
  }
  template <typename Draw>
  ImPlotRect frame(const Draw& draw) {
    ImPlotRect shown;
    ImGui::NewFrame();
    ImGui::SetNextWindowPos(ImVec2(0, 0));
    ImGui::SetNextWindowSize(ImGui::GetIO().DisplaySize);
    ImGui::Begin("##test", nullptr, ImGuiWindowFlags_NoDecoration);
    draw([&] { shown = ImPlot::GetPlotLimits(); });
    ImGui::End();
    ImGui::Render();
    acknowledge_texture_requests(*ImGui::GetDrawData());
    return shown;
  }
};

}  // namespace

TEST_CASE("fitted line plots keep a margin around their data, in log space on a log axis", "[figure]") {
  PlotFrames frames;
  for (const bool log_y : {false, true}) {
    const LinePlot p = line_plot(10, 50, log_y ? 1e-4 : 2.0, log_y ? 1.0 : 6.0, log_y, 0);
    auto draw = [&](const PlotHook& hook) { draw_line_plot(log_y ? "log" : "lin", p, ImVec2(600, 400), hook); };
    frames.frame(draw);  // the data is new: this frame fits
    const ImPlotRect r = frames.frame(draw);
    // x: 40 wide, so 2 either side; y: 5 % of the span either side, of the decades on the log axis.
    CHECK(r.X.Min == Approx(8.0));
    CHECK(r.X.Max == Approx(52.0));
    if (log_y) {
      CHECK(std::log10(r.Y.Min) == Approx(-4.2));
      CHECK(std::log10(r.Y.Max) == Approx(0.2));
    } else {
      CHECK(r.Y.Min == Approx(1.8));
      CHECK(r.Y.Max == Approx(6.2));
    }
    // A double-click fit (the same request) keeps the margin.
    frames.frame([&](const PlotHook& hook) {
      ImPlot::SetNextAxesToFit();
      draw(hook);
    });
    const ImPlotRect again = frames.frame(draw);
    CHECK(again.X.Min == Approx(r.X.Min));
    CHECK(again.Y.Max == Approx(r.Y.Max));
  }
}

TEST_CASE("a fitted attention map keeps its key-mark strip in view", "[figure]") {
  PlotFrames frames;
  const HeatmapPlot p = square_heatmap(256);
  auto draw = [&](const PlotHook& hook) { draw_heatmap("map", p, ImVec2(600, 400), frames.textures, hook); };
  const ImPlotRect first = frames.frame(draw);
  const ImPlotRect opened = frames.frame(draw);
  const double strip_end = 256 + 0.035 * 256;
  CHECK(std::max(opened.Y.Min, opened.Y.Max) == Approx(strip_end));
  (void)first;
  // A fit (what a double-click asks for) used to shrink the view to the map alone, the strip below it gone.
  frames.frame([&](const PlotHook& hook) {
    ImPlot::SetNextAxesToFit();
    draw(hook);
  });
  const ImPlotRect fitted = frames.frame(draw);
  CHECK(std::max(fitted.Y.Min, fitted.Y.Max) == Approx(strip_end));
  CHECK(std::min(fitted.Y.Min, fitted.Y.Max) == Approx(0.0));
  CHECK(fitted.X.Max == Approx(256.0));
}

TEST_CASE("token labels too long for their cells across are drawn upright, inside the band their ticks reserve",
          "[figure]") {
  // 24 cells of about 40 px at a 14 px font: a cell is two lines wide, and no 9-letter token fits across it.
  HeatmapPlot p = constant_heatmap(0.01f);
  p.map.rows = p.map.cols = p.map.source_rows = p.map.source_cols = 24;
  p.map.values.assign(24 * 24, 0.01f);
  p.signature = "upright";
  // In DejaVu Sans, the export font, nine x's run 5.3 em and three m's 2.9 em.
  for (int c = 0; c < 24; ++c) p.x_tokens.push_back(c % 2 ? "xxxxxxxxx" : "mmm");
  Figure f;
  f.parts.push_back(p);
  // The window's drawing (ImPlot's, as the dark PNG shows it): its text is light on the dark window.
  FigureRenderer renderer;
  const Image img = renderer.render(f, ExportOptions{1100, 700, 14.0f, true});
  std::vector<TickLabelBox> x_labels;
  for (const auto& b : renderer.tick_labels())
    if (!b.vertical) x_labels.push_back(b);
  REQUIRE(x_labels.size() == 24);
  auto dark = [&](int x0, int y0, int x1, int y1) {  // text pixels (light on the dark window)
    int n = 0;
    for (int y = std::max(0, y0); y < std::min(img.height, y1); ++y)
      for (int x = std::max(0, x0); x < std::min(img.width, x1); ++x) n += img.at(x, y).r > 150;
    return n;
  };
  float band_top = 1e9f, band_bottom = 0;
  for (const auto& b : x_labels) {
    INFO("label box [" << b.x0 << ", " << b.x1 << "] x [" << b.y0 << ", " << b.y1 << "]");
    // Upright: a line wide, as tall as the token is long (nine x's are longer than three m's).
    CHECK(b.x1 - b.x0 == Approx(14.0f));
    CHECK(b.y1 - b.y0 > 2.5f * (b.x1 - b.x0));
    band_top = std::min(band_top, b.y0), band_bottom = std::max(band_bottom, b.y1);
    // Its glyphs are inside its box.
    CHECK(dark(static_cast<int>(b.x0), static_cast<int>(b.y0), static_cast<int>(b.x1) + 1, static_cast<int>(b.y1) + 1) > 20);
  }
  CHECK(x_labels[1].y1 - x_labels[1].y0 > 1.5f * (x_labels[0].y1 - x_labels[0].y0));
  // Nothing of them spills between the boxes in the band (a wrong turn would lay the text across).
  int inside = 0;
  for (const auto& b : x_labels)
    inside += dark(static_cast<int>(b.x0) - 1, static_cast<int>(b.y0) - 1, static_cast<int>(b.x1) + 2, static_cast<int>(b.y1) + 2);
  const int band = dark(static_cast<int>(x_labels.front().x0) - 1, static_cast<int>(band_top) - 1,
                        static_cast<int>(x_labels.back().x1) + 2, static_cast<int>(band_bottom) + 2);
  CHECK(band == inside);
}

TEST_CASE("an exported map names its tokens as the window does: across when they fit, else upright", "[figure]") {
  HeatmapPlot p = constant_heatmap(0.01f);
  p.map.rows = p.map.cols = p.map.source_rows = p.map.source_cols = 24;
  p.map.values.assign(24 * 24, 0.01f);
  for (int c = 0; c < 24; ++c) p.x_tokens.push_back(c % 2 ? "xxxxxxxxx" : "mmm");
  p.y_tokens = p.x_tokens;
  Figure f;
  f.parts.push_back(p);
  // 24 cells of about 40 px: upright under the keys, across beside the queries (a cell is two lines tall).
  const std::string svg = figure_svg(f, 1100, 700, 14.0f);
  const std::regex upright(R"re(rotate\(-90\)" font-size="14" text-anchor="end">xxxxxxxxx</text>)re");
  CHECK(std::distance(std::sregex_iterator(svg.begin(), svg.end(), upright), std::sregex_iterator()) == 12);
  const std::regex across(R"(text-anchor="end">mmm</text>)");
  CHECK(std::distance(std::sregex_iterator(svg.begin(), svg.end(), across), std::sregex_iterator()) == 24);
  // Zoomed out (a cell a third of a line), numbers instead.
  p.map.rows = p.map.cols = p.map.source_rows = p.map.source_cols = 240;
  p.map.values.assign(240 * 240, 0.01f);
  p.x_tokens.assign(240, "mmm");
  p.y_tokens = p.x_tokens;
  f.parts[0] = p;
  CHECK(figure_svg(f, 1100, 700, 14.0f).find(">mmm<") == std::string::npos);
}
