#include "viewers/figure_export.h"

#include <imgui.h>
#include <implot.h>
#include <implot_internal.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "viewers/drawlist_canvas.h"
#include "viewers/figure_size.h"
#include "viewers/figure_vector.h"
#include "viewers/font_metrics.h"
#include "viewers/soft_render.h"

namespace kvscope::viewers {

namespace {

// What either drawing refuses before it starts: a figure without plots, a size out of range.
void check_drawable(const Figure& figure, const ExportOptions& options) {
  if (figure.empty()) throw Error("nothing to export: the figure '" + figure.title + "' has no plots");
  if (options.width < 64 || options.height < 64 || options.width > 16384 || options.height > 16384)
    throw UsageError("figure size " + std::to_string(options.width) + "x" + std::to_string(options.height) +
                     " is out of range (64..16384 pixels per side)");
}

// The renderer's own ImGui and ImPlot contexts for a drawing, the caller's (the window's) back afterwards.
class ContextScope {
 public:
  ContextScope(ImGuiContext* imgui, ImPlotContext* implot)
      : prev_(ImGui::GetCurrentContext()), prev_plot_(ImPlot::GetCurrentContext()) {
    ImGui::SetCurrentContext(imgui);
    ImPlot::SetCurrentContext(implot);
  }
  ~ContextScope() {
    ImGui::SetCurrentContext(prev_);
    ImPlot::SetCurrentContext(prev_plot_);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  ImGuiContext* prev_;
  ImPlotContext* prev_plot_;
};

}  // namespace

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
  // DejaVu Sans, the SVG and PDF font, so every format of a figure reads alike; without the file, the
  // scalable embedded font (figures are exported at many sizes and the pixel font only suits 13 px).
  const FigureFont& font = figure_font();
  ImFontConfig config;
  config.FontDataOwnedByAtlas = false;
  if (!font.loaded() || !io.Fonts->AddFontFromMemoryTTF(const_cast<char*>(font.regular_bytes.data()),
                                                        static_cast<int>(font.regular_bytes.size()), 0.0f, &config))
    io.Fonts->AddFontDefaultVector();
  if (font.loaded() && !font.bold_bytes.empty())
    title_font_ = io.Fonts->AddFontFromMemoryTTF(const_cast<char*>(font.bold_bytes.data()),
                                                 static_cast<int>(font.bold_bytes.size()), 0.0f, &config);
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

Image FigureRenderer::render(const Figure& figure, const ExportOptions& options) {
  return options.dark ? draw(figure, options, true) : draw_vector(figure, options);
}

Image FigureRenderer::draw_vector(const Figure& figure, const ExportOptions& options) {
  check_drawable(figure, options);
  const ContextScope scope(imgui_, implot_);
  ImGuiIO& io = ImGui::GetIO();
  io.DisplaySize = ImVec2(static_cast<float>(options.width), static_cast<float>(options.height));
  io.DeltaTime = 1.0f / 60.0f;
  SoftTextureStore textures;
  Image target;
  // The first frame bakes the glyphs at the figure's sizes into the atlas; the second draws with them settled.
  for (int frame = 0; frame < 2; ++frame) {
    ImGui::NewFrame();
    DrawListCanvas canvas(*ImGui::GetBackgroundDrawList(), io.Fonts->Fonts[0], title_font_, textures);
    draw_figure_vector(canvas, figure, vector_options(options));
    ImGui::Render();
    ImDrawData* dd = ImGui::GetDrawData();
    acknowledge_texture_requests(*dd);
    if (frame == 1) {
      target = Image(options.width, options.height, Rgba{255, 255, 255, 255});
      rasterize(*dd, textures, target);
    }
  }
  return target;
}

void FigureRenderer::lay_out(const Figure& figure, const ExportOptions& options) { draw(figure, options, false); }

Image FigureRenderer::draw(const Figure& figure, const ExportOptions& options, bool to_pixels) {
  check_drawable(figure, options);
  const ContextScope scope(imgui_, implot_);

  ImGuiIO& io = ImGui::GetIO();
  io.DisplaySize = ImVec2(static_cast<float>(options.width), static_cast<float>(options.height));
  io.DeltaTime = 1.0f / 60.0f;
  ImGuiStyle& style = ImGui::GetStyle();
  const SeriesLookScope look(options.look);
  if (options.dark) {
    ImGui::StyleColorsDark();
    ImPlot::StyleColorsDark();
  } else {
    ImGui::StyleColorsLight();
    ImPlot::StyleColorsLight();
    // Paper: white everywhere (ImGui's light window is grey), black text and axes, no grey frame.
    style.Colors[ImGuiCol_WindowBg] = ImVec4(1, 1, 1, 1);
    style.Colors[ImGuiCol_Text] = ImVec4(0, 0, 0, 1);
    ImPlotStyle& plot = ImPlot::GetStyle();
    plot.Colors[ImPlotCol_PlotBg] = ImVec4(1, 1, 1, 1);
    plot.Colors[ImPlotCol_FrameBg] = ImVec4(1, 1, 1, 1);
    plot.Colors[ImPlotCol_PlotBorder] = ImVec4(0.2f, 0.2f, 0.2f, 1);
    plot.Colors[ImPlotCol_LegendBg] = ImVec4(1, 1, 1, 0.9f);
    plot.Colors[ImPlotCol_LegendBorder] = ImVec4(0.8f, 0.8f, 0.8f, 1);
    plot.Colors[ImPlotCol_AxisGrid] = options.look == FigureLook::Matplotlib ? ImVec4(0, 0, 0, 0) : ImVec4(0.88f, 0.88f, 0.88f, 1);
    plot.Colors[ImPlotCol_AxisText] = ImVec4(0, 0, 0, 1);
    plot.Colors[ImPlotCol_TitleText] = ImVec4(0, 0, 0, 1);
    plot.Colors[ImPlotCol_InlayText] = ImVec4(0, 0, 0, 1);
  }
  style.FontSizeBase = export_font_px(options);
  // A narrow margin: the figure's parts are laid out on nearly its whole width, as the SVG and PDF lay them
  // (figure_size.h decides the rows from that width).
  style.WindowPadding = ImVec2(style.FontSizeBase * 0.25f, style.FontSizeBase * 0.25f);
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
    set_figure_title_font(title_font_);
    draw_figure(figure, ImGui::GetContentRegionAvail(), textures);
    set_figure_title_font(nullptr);
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

VectorOptions vector_options(const ExportOptions& options) {
  VectorOptions v;
  v.width = options.width, v.height = options.height, v.font_px = export_font_px(options), v.dpi = options.dpi;
  v.look = options.look;
  return v;
}

float export_font_px(const ExportOptions& options) {
  return options.font_px > 0 ? options.font_px : std::max(13.0f, std::round(options.height / 50.0f));
}

ExportOptions sized_export(const Figure& figure, const std::string& size_text, FigureLook look, double dpi,
                           float font_px) {
  const FigureSize size = size_text.empty() ? FigureSize{} : parse_figure_size(size_text, dpi);
  ExportOptions e;
  e.width = size.width, e.height = size.height, e.font_px = font_px, e.look = look, e.dpi = dpi;
  const double points = size.points > 0 && look == FigureLook::Matplotlib ? 10.0 : size.points;
  if (e.font_px <= 0 && points > 0) e.font_px = static_cast<float>(points * dpi / 72.0);
  if (size.auto_height) e.height = figure_height(figure, e.width, export_font_px(e));
  return e;
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
  if (ext == "svg" || ext == "pdf") {
    if (options.width < 64 || options.height < 64 || options.width > 16384 || options.height > 16384)
      throw UsageError("figure size " + std::to_string(options.width) + "x" + std::to_string(options.height) +
                       " is out of range (64..16384 pixels per side)");
    const VectorOptions v = vector_options(options);
    if (ext == "svg") write_file_atomically(path, figure_svg(figure, v), "SVG", existing);
    else write_file_atomically(path, figure_pdf(figure, v), "PDF", existing);
    return;
  }
  if (ext != "png") throw UsageError("cannot export to '" + path + "': use a .png, .svg or .pdf file name");
  FigureRenderer renderer;
  write_png(renderer.render(figure, options), path, existing);
}

}  // namespace kvscope::viewers
