#pragma once
// What a panel shows, as data: line/bar plots and heatmaps with their titles, axes, labels and colour
// scales. The window draws them with ImPlot; figure_export draws the same specs offscreen to PNG (and
// to SVG and PDF, figure_vector.h), so an exported figure is the panel the user was looking at.
#include <array>
#include <optional>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include <imgui.h>

#include "core/trace/trace_view.h"
#include "viewers/axis_ticks.h"
#include "viewers/colormap.h"
#include "viewers/figure_style.h"
#include "viewers/series_style.h"
#include "viewers/texture.h"

namespace kvscope::viewers {

// Cells that had no attention at all (causal mask, keys not in the cache): a neutral grey that no colormap's low end
// uses (viridis purple, magma and inferno black, greys white), so they do not read as near-zero attention.
inline constexpr Rgba kNoAttentionColor{118, 118, 126, 255};
// Positions the cache had not reached yet at the selected step (the key-mark strip).
inline constexpr Rgba kNotYetColor{70, 70, 78, 255};

// Key marks under a map: evicted and merged keys.
inline constexpr Rgba kEvictedColor{214, 39, 40, 255};
inline constexpr Rgba kMergedColor{255, 160, 20, 255};

// The series palette of the current look (figure_style.h: the window's "Deep", or matplotlib's tab10 while an
// export in that style draws), shared by ImPlot drawing and the vector writers so they agree.
Rgba series_color(int index);
// Sets the look series_color answers with on this thread until the scope ends.
class SeriesLookScope {
 public:
  explicit SeriesLookScope(FigureLook look);
  ~SeriesLookScope();
  SeriesLookScope(const SeriesLookScope&) = delete;
  SeriesLookScope& operator=(const SeriesLookScope&) = delete;

 private:
  FigureLook previous_;
};

struct LineSeries {
  enum class Kind { Line, Bars, Stairs, Markers };
  std::string name;
  Kind kind = Kind::Line;
  std::vector<double> x, y;
  std::vector<double> y_low, y_high;  // optional band around the line (e.g. min..max over heads)
  double bar_width = 0.8;             // in x units
  int color = -1;                     // palette index; -1 = position in the plot; kInkSeries: black
  int marker = -1;                    // marker shape (series_style.h); -1: by position in the plot
  int dash = -1;                      // dash pattern of a line (series_style.h); -1: by position in the plot
  double marker_scale = 1.0;          // markers this many times the usual size (the Pareto front's rings)
};

// The (colour, marker, dash) series `position` of its plot is drawn in: what it sets, the rest by position.
inline SeriesStyle line_style(const LineSeries& s, std::size_t position) {
  SeriesStyle style = default_series_style(static_cast<int>(position));
  if (s.color != -1) style.color = s.color;
  if (s.marker != -1) style.marker = s.marker;
  if (s.dash != -1) style.dash = s.dash;
  return style;
}

struct LinePlot {
  std::string title, x_label, y_label;
  std::vector<LineSeries> series;
  bool log_y = false;
  std::vector<double> marks_x;  // vertical guides (the selected layer, ...)
  std::vector<std::string> x_tick_labels;  // non-empty: category names at x = 0, 1, 2 ...
  bool legend_outside = false;             // many series: keep the legend off the data
  bool integer_x = false;                  // x counts whole things (layers): ticks at integers only
  std::optional<std::array<double, 2>> y_limits;  // a fixed y range (a share: 0..1); unset: fitted to the data
};

struct Category {
  std::string name;
  Rgba color;
};

// A map drawn as an image. x runs over source columns (keys), y over source rows (queries or steps),
// row 0 at the top.
struct HeatmapPlot {
  std::string title, x_label, y_label, colorbar_label;
  trace::Map2D map;
  ColorScale scale;
  Colormap cmap = Colormap::Viridis;
  std::vector<Category> categories;  // non-empty: values are category indices, shown with a legend
  // Per source column: 0 in the cache, 1 evicted, 2 merged, 3 not yet in the cache (at the selected step). Drawn as a
  // strip under the map.
  std::vector<uint8_t> column_marks;
  // Non-empty: NaN cells are cells without attention (masked, or keys not in the cache), drawn in kNoAttentionColor
  // with this legend entry, apart from every colour of the scale. Empty: NaN cells in the colorize default.
  std::string no_attention_label;
  bool mark_legend = true;  // name the mark and no-attention colours in a legend (off in narrow compare columns)
  std::string signature;  // identifies the content, for texture caching
  // Plot coordinates of the map's top-left corner: a region of a larger map (positions x_origin.., y_origin..).
  double x_origin = 0.0, y_origin = 0.0;
  // Per plot coordinate (a position: cell p spans [p, p + 1)), the token there: the axis names the cells once
  // they are wide enough for it. Empty: numbers only.
  std::vector<std::string> x_tokens, y_tokens;
  // Vertical guides at these plot x coordinates (the evidence view's first answer step).
  std::vector<double> marks_x;
  bool colorbar = true;  // off: a figure draws one bar for several maps on the same scale (colour_scale_key)
  // The map's last column is not a key but the sink's share of each row (gpt-oss; add_sink_column).
  bool sink_column = false;
  // x0, x1, y0, y1 the plot shows from this frame on (a script's zoom); unset: the whole map, then the user's view.
  std::optional<std::array<double, 4>> view;
};

struct Figure {
  std::string title;  // for the export dialog and file names
  std::vector<std::variant<LinePlot, HeatmapPlot>> parts;  // laid out left to right
  bool empty() const { return parts.empty(); }
};

// Where the key-mark strip of a map is drawn, in pixels (y down): just below the map's last row (`below_map`; the
// space reserved for it ends at `strip_end`), a constant 0.5-1 em tall; `pinned` to the bottom of the plot area
// [area_top, area_bottom] over the map when the map's last row is below it (a zoom into earlier rows).
struct KeyStripPixels {
  float top = 0, bottom = 0;
  bool pinned = false;
};
KeyStripPixels key_strip_pixels(float below_map, float strip_end, float area_top, float area_bottom, float font);

// Called inside BeginPlot/EndPlot after the data is drawn (hover read-outs, drag tools, clicks).
using PlotHook = std::function<void()>;

// Draws into the current ImGui window with ImPlot, `size` including the colourbar or legend.
void draw_line_plot(const char* id, const LinePlot& plot, ImVec2 size, const PlotHook& hook = {});
// The font draw_figure sets titles in (bold DejaVu Sans, in an export's context), at 1.2 times the text, as the
// vector figures do; null (the window): the text font.
void set_figure_title_font(ImFont* bold);

void draw_heatmap(const char* id, const HeatmapPlot& plot, ImVec2 size, TextureStore& textures, const PlotHook& hook = {});
// A whole figure for export: parts in rows (figure_size.h's parts_per_row), titles wrapped over their part, maps on
// one colour scale sharing one colour bar at the right.
void draw_figure(const Figure& figure, ImVec2 size, TextureStore& textures);

// Draws an image texture over plot coordinates [x0, x1) x [y0, y1) of the current plot (y axis inverted, as in
// draw_heatmap) with nearest-texel sampling, so a cell stays one flat colour however far it is magnified.
void plot_map_image(const char* id, ImTextureID texture, double x0, double y0, double x1, double y1);

// Adds our colormaps to the current ImPlot context (once per context) and returns its ImPlot index.
int implot_colormap(Colormap cmap);

// A colour bar's ticks along `pixels`, in the scale's axis units (log10 of the data on a log scale, ticked at whole
// powers of ten and labelled with the data's own numbers: 0.01, 1e-3), spaced by their labels as axes are.
std::vector<AxisTick> colour_bar_ticks(const ColorScale& scale, double pixels, double gap, const LabelExtent& extent);
// A colour bar's title: `label` ("log10 attention" reads "attention (log scale)", its ticks being the data's numbers).
std::string colour_bar_title(const std::string& label, ScaleKind kind);
// A colour bar at the cursor taking `size`, its gradient from screen y `top` to `bottom` (the maps' plot area),
// with ticks and title as the SVG and PDF draw them.
void draw_colour_bar(const ColorScale& scale, Colormap cmap, const std::string& label, ImVec2 size, float top, float bottom);

// Maps with equal keys are drawn on the same colour scale and can share one colour bar; "" for category maps.
std::string colour_scale_key(const HeatmapPlot& plot);

// A map's cells as a picture, one pixel a cell: its colour scale, categories or no-attention colour.
Image map_image(const HeatmapPlot& plot);

}  // namespace kvscope::viewers
