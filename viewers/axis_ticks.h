#pragma once
// Axis ticks whose labels never run into each other. ImPlot's own locator takes its step from the axis
// length alone and thins the labels only by hiding every other one once their total width passes the
// axis, so on a narrow panel "80 100 120 140" printed as one word. Here the step is chosen from the labels
// themselves: the finest round step at which every label, centred on its tick, stays `gap` pixels clear
// of its neighbours, measured with the font that draws it.
#include <functional>
#include <string>
#include <vector>

#include <implot.h>

namespace kvscope::viewers {

struct AxisTick {
  double value = 0.0;
  std::string label;  // empty for minor ticks
  bool major = true;
};

// A label's size along the axis in pixels: its width on a horizontal axis, its height on a vertical one.
using LabelExtent = std::function<float(const std::string&)>;
using TickFormat = std::function<std::string(double)>;

// Where a value sits along the axis, in pixels from the axis' low end.
using AxisPosition = std::function<double(double)>;

// Every function takes the axis length `pixels`, the least `gap` between neighbouring labels, and the
// `overhang`: how far a label may reach past either end of the axis (on x, past the plot area into the
// corner where the y labels are). A tick whose label would reach further stays a tick, without a label.

// Linear axis over [lo, hi]: majors at multiples of the finest step 1, 2 or 5 x 10^k whose labels fit,
// minors between them. One labelled tick when no step with two fits; none for an empty or infinite range.
std::vector<AxisTick> spaced_linear_ticks(double lo, double hi, double pixels, double gap, double overhang,
                                          const TickFormat& format, const LabelExtent& extent);
// An axis of whole numbers (positions, steps, layers): the linear ticks at integer values only.
std::vector<AxisTick> spaced_integer_ticks(double lo, double hi, double pixels, double gap, double overhang,
                                           const TickFormat& format, const LabelExtent& extent);
// Log10 axis over [lo, hi] (both > 0): majors at every k-th power of ten for the smallest k that fits;
// a range inside one decade gets round linear values placed on the log scale.
std::vector<AxisTick> spaced_log_ticks(double lo, double hi, double pixels, double gap, double overhang,
                                       const TickFormat& format, const LabelExtent& extent);
// Categories at x = 0, 1, 2 ...: every k-th name for the smallest k in 1, 2, 5, 10 ... that fits.
std::vector<AxisTick> spaced_category_ticks(double lo, double hi, double pixels, double gap, double overhang,
                                            const std::vector<std::string>& names, const LabelExtent& extent);

// The least room between neighbouring labels, in ems of the font that draws them: a label's width or
// more across, so numbers read as separate; more than a line up the side, so a tall axis is not a column
// of numbers.
inline constexpr double kLabelGapAcrossEm = 1.0;
inline constexpr double kLabelGapUpEm = 1.2;

// True when labels centred at `position(value)` keep `gap` pixels between neighbours.
bool labels_fit(const std::vector<AxisTick>& ticks, const AxisPosition& position, double gap,
                const LabelExtent& extent);

// "%g", as ImPlot labels its ticks.
std::string tick_text(double value);

// Inside BeginPlot, after the axis (and its scale) is set up and before anything is plotted: the axis
// takes its ticks from the functions above, measured with the current ImGui font. `names` (category
// labels at 0, 1, 2 ...) must outlive EndPlot.
void use_spaced_ticks(ImAxis axis);
void use_integer_ticks(ImAxis axis);  // linear, whole numbers only
void use_category_ticks(ImAxis axis, const std::vector<std::string>& names);
// A position axis (cell p spans [p, p + 1)) that names each cell with tokens[p] once every visible cell has
// room for its label, and shows round numbers before that. `tokens` must outlive EndPlot.
// On x, cells at least a line wide but too narrow for their text across get it upright instead: call
// draw_rotated_token_labels between SetupFinish and EndPlot to draw it (nothing happens otherwise).
void use_token_ticks(ImAxis axis, const std::vector<std::string>& tokens);
void draw_rotated_token_labels(ImAxis axis, const std::vector<std::string>& tokens);

}  // namespace kvscope::viewers
