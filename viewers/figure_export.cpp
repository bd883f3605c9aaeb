#include "viewers/figure_export.h"

#include <imgui.h>
#include <implot.h>
#include <implot_internal.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "viewers/soft_render.h"

namespace kvscope::viewers {

FigureRenderer::FigureRenderer() {
  ImGuiContext* prev = ImGui::GetCurrentContext();
  ImPlotContext* prev_plot = ImPlot::GetCurrentContext();
  imgui_ = ImGui::CreateContext();
  ImGui::SetCurrentContext(imgui_);
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // an offscreen context has no layout worth remembering
  io.LogFilename = nullptr;
  io.BackendRendererName = "kvscope_soft";
  io.BackendFlags |= ImGuiBackendFlags_RendererHasTextures | ImGuiBackendFlags_RendererHasVtxOffset;
  // The scalable embedded font: figures are exported at many sizes and the pixel font only suits 13 px.
  io.Fonts->AddFontDefaultVector();
  implot_ = ImPlot::CreateContext();
  ImGui::SetCurrentContext(prev);
  ImPlot::SetCurrentContext(prev_plot);
}

FigureRenderer::~FigureRenderer() {
  ImGuiContext* prev = ImGui::GetCurrentContext();
  ImPlotContext* prev_plot = ImPlot::GetCurrentContext();
  ImGui::SetCurrentContext(imgui_);
  ImPlot::DestroyContext(implot_);
  ImGui::DestroyContext(imgui_);
  ImGui::SetCurrentContext(prev == imgui_ ? nullptr : prev);
  ImPlot::SetCurrentContext(prev_plot == implot_ ? nullptr : prev_plot);
}

Image FigureRenderer::render(const Figure& figure, const ExportOptions& options) { return draw(figure, options, true); }

void FigureRenderer::lay_out(const Figure& figure, const ExportOptions& options) { draw(figure, options, false); }

Image FigureRenderer::draw(const Figure& figure, const ExportOptions& options, bool to_pixels) {
  if (figure.empty()) throw Error("nothing to export: the figure '" + figure.title + "' has no plots");
  if (options.width < 64 || options.height < 64 || options.width > 16384 || options.height > 16384)
    throw UsageError("figure size " + std::to_string(options.width) + "x" + std::to_string(options.height) +
                     " is out of range (64..16384 pixels per side)");
  ImGuiContext* prev = ImGui::GetCurrentContext();
  ImPlotContext* prev_plot = ImPlot::GetCurrentContext();
  ImGui::SetCurrentContext(imgui_);
  ImPlot::SetCurrentContext(implot_);
  struct Restore {
    ImGuiContext* a;
    ImPlotContext* b;
    ~Restore() {
      ImGui::SetCurrentContext(a);
      ImPlot::SetCurrentContext(b);
    }
  } restore{prev, prev_plot};

  ImGuiIO& io = ImGui::GetIO();
  io.DisplaySize = ImVec2(static_cast<float>(options.width), static_cast<float>(options.height));
  io.DeltaTime = 1.0f / 60.0f;
  ImGuiStyle& style = ImGui::GetStyle();
  if (options.dark) {
    ImGui::StyleColorsDark();
    ImPlot::StyleColorsDark();
  } else {
    ImGui::StyleColorsLight();
    ImPlot::StyleColorsLight();
    ImPlot::GetStyle().Colors[ImPlotCol_PlotBg] = ImVec4(1, 1, 1, 1);
    ImPlot::GetStyle().Colors[ImPlotCol_FrameBg] = ImVec4(1, 1, 1, 1);
  }
  style.FontSizeBase = options.font_px > 0 ? options.font_px : std::max(13.0f, std::round(options.height / 50.0f));
  style.WindowPadding = ImVec2(style.FontSizeBase * 0.6f, style.FontSizeBase * 0.6f);
  style.WindowBorderSize = 0.0f;  // the figure is the whole picture; a window frame would read as part of it
  ImPlot::GetStyle().PlotPadding = ImVec2(style.FontSizeBase * 0.6f, style.FontSizeBase * 0.6f);
  // Label padding grows with the font, so the x label at the plot's left edge (a "0") may reach as far
  // past it as half a digit without meeting the y labels (axis_ticks.h).
  ImPlot::GetStyle().LabelPadding = ImVec2(style.FontSizeBase * 0.4f, style.FontSizeBase * 0.3f);

  // Plots of earlier renders go: their axis state (limits set once, fitted extents) must not leak into
  // this figure, and tick_labels() reports this render's plots only.
  implot_->Plots.Clear();

  SoftTextureStore textures;
  Image target;
  // ImPlot sizes its axis padding from the previous frame's tick labels, so the second frame is the
  // settled one; the first only warms the layout and the font atlas.
  for (int frame = 0; frame < 2; ++frame) {
    ImGui::NewFrame();
    ImGui::SetNextWindowPos(ImVec2(0, 0));
    ImGui::SetNextWindowSize(io.DisplaySize);
    ImGui::Begin("##figure", nullptr,
                 ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings |
                     ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoScrollWithMouse);
    draw_figure(figure, ImGui::GetContentRegionAvail(), textures);
    ImGui::End();
    ImGui::Render();
    ImDrawData* dd = ImGui::GetDrawData();
    acknowledge_texture_requests(*dd);
    if (frame == 1 && to_pixels) {
      const ImVec4 bg = style.Colors[ImGuiCol_WindowBg];
      target = Image(options.width, options.height,
                     Rgba{static_cast<uint8_t>(bg.x * 255), static_cast<uint8_t>(bg.y * 255), static_cast<uint8_t>(bg.z * 255), 255});
      rasterize(*dd, textures, target);
    }
  }
  return target;
}

std::vector<TickLabelBox> FigureRenderer::tick_labels() const {
  std::vector<TickLabelBox> boxes;
  const ImPlotStyle& style = implot_->Style;
  for (int p = 0; p < implot_->Plots.GetBufSize(); ++p) {
    const ImPlotPlot& plot = *implot_->Plots.GetByIndex(p);
    for (int a = 0; a < ImAxis_COUNT; ++a) {
      const ImPlotAxis& ax = plot.Axes[a];
      if (!ax.Enabled || !ax.HasTickLabels() || ax.IsOpposite()) continue;
      const bool vertical = a >= ImAxis_Y1;
      const ImRect& r = plot.PlotRect;
      for (int t = 0; t < ax.Ticker.TickCount(); ++t) {
        const ImPlotTick& tick = ax.Ticker.Ticks[t];
        // The placement rules of ImPlot's SetupFinish, where the label text is drawn (our locators put
        // every label on the first level).
        const float lo = vertical ? r.Min.y : r.Min.x, hi = vertical ? r.Max.y : r.Max.x;
        if (!tick.ShowLabel || tick.PixelPos < lo - 1 || tick.PixelPos > hi + 1) continue;
        TickLabelBox b;
        b.text = ax.Ticker.GetText(t);
        b.axis = p * ImAxis_COUNT + a;
        b.vertical = vertical;
        b.axis_pixels = hi - lo;
        b.x0 = vertical ? ax.Datum1 - style.LabelPadding.x - tick.LabelSize.x : tick.PixelPos - 0.5f * tick.LabelSize.x;
        b.y0 = vertical ? tick.PixelPos - 0.5f * tick.LabelSize.y : ax.Datum1 + style.LabelPadding.y;
        b.x1 = b.x0 + tick.LabelSize.x;
        b.y1 = b.y0 + tick.LabelSize.y;
        boxes.push_back(std::move(b));
      }
    }
  }
  return boxes;
}

namespace {

std::string lower_extension(const std::string& path) {
  const auto dot = path.find_last_of('.');
  if (dot == std::string::npos) return "";
  std::string ext = path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

}  // namespace

void export_figure(const Figure& figure, const std::string& path, const ExportOptions& options, Existing existing) {
  const std::string ext = lower_extension(path);
  if (ext == "svg") {
    const float font = options.font_px > 0 ? options.font_px : std::max(12.0f, std::round(options.height / 50.0f));
    const std::string svg = figure_svg(figure, options.width, options.height, font);
    write_file_atomically(path, svg, "SVG", existing);
    return;
  }
  if (ext != "png") throw UsageError("cannot export to '" + path + "': use a .png or .svg file name");
  FigureRenderer renderer;
  write_png(renderer.render(figure, options), path, existing);
}

}  // namespace kvscope::viewers
