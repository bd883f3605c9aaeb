// Headless figures: the offscreen ImGui/ImPlot context plus the software rasteriser must produce the
// colours the colormap defines, and SVG output must carry the plot's text and data.
#include <catch2/catch.hpp>

#include <imgui.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/common/error.h"
#include "viewers/figure.h"
#include "viewers/figure_export.h"
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

TEST_CASE("nice ticks are round and cover the range", "[figure]") {
  const auto t = nice_ticks(0.0, 29.0, 6);
  REQUIRE(!t.empty());
  CHECK(t.front() == 0.0);
  CHECK(t[1] - t[0] == 5.0);
  CHECK(t.back() <= 29.0);
  const auto s = nice_ticks(-0.013, 0.021, 4);
  for (double v : s) CHECK(std::fabs(v / 0.01 - std::round(v / 0.01)) < 1e-9);
  CHECK(nice_ticks(1.0, 1.0, 5).empty());
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

TEST_CASE("line plots export to SVG; heatmaps do not", "[figure]") {
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
  CHECK_THROWS_AS(figure_svg(h, 800, 500), Error);

  const auto dir = std::filesystem::temp_directory_path() / "kvscope_figure_test";
  std::filesystem::create_directories(dir);
  export_figure(f, (dir / "lines.svg").string(), ExportOptions{});
  export_figure(h, (dir / "map.png").string(), ExportOptions{320, 240, 0.0f, false});
  CHECK(std::filesystem::file_size(dir / "lines.svg") > 500);
  std::ifstream png(dir / "map.png", std::ios::binary);
  char magic[8] = {};
  png.read(magic, 8);
  CHECK(std::string(magic + 1, 3) == "PNG");
  CHECK_THROWS_AS(export_figure(f, (dir / "x.jpg").string(), ExportOptions{}), UsageError);
  std::filesystem::remove_all(dir);
}
