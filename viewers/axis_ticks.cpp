#include "viewers/axis_ticks.h"

#include <imgui.h>
#include <implot_internal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace kvscope::viewers {

namespace {

// Ticks closer than this are never worth drawing, labelled or not.
constexpr double kMinTickPixels = 3.0;

// What every candidate set of ticks is judged against.
struct Axis {
  double pixels, gap, overhang;
  const LabelExtent& extent;
  AxisPosition position;
};

// The round steps 1, 2, 5 x 10^k from the first at or above `smallest` up to ten times `largest`
// (where a range holds at most one multiple).
std::vector<double> round_steps(double smallest, double largest) {
  std::vector<double> steps;
  if (!(smallest > 0) || !std::isfinite(smallest) || !std::isfinite(largest)) return steps;
  for (double decade = std::pow(10.0, std::floor(std::log10(smallest))); decade <= largest * 10; decade *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (m * decade >= smallest * (1 - 1e-9) && m * decade <= largest * 10) steps.push_back(m * decade);
  return steps;
}

// Multiples of `step` inside [lo, hi]; exact zero, so "-0" and "1e-17" never become labels. None when
// there would be more than an axis can show, which also covers a range zoomed in so far from zero that
// consecutive multiples are no longer distinct doubles.
std::vector<double> multiples(double lo, double hi, double step) {
  std::vector<double> out;
  const double k0 = std::ceil(lo / step - 1e-9), k1 = std::floor(hi / step + 1e-9);
  if (!(k1 - k0 < 1e5) || std::fabs(k0) > 1e15 || std::fabs(k1) > 1e15) return out;
  for (long long k = static_cast<long long>(k0); k <= static_cast<long long>(k1); ++k)
    out.push_back(k == 0 ? 0.0 : static_cast<double>(k) * step);
  return out;
}

// Clears the labels that would reach further than the overhang past the axis ends; returns how many
// labels are left.
int drop_overhanging(std::vector<AxisTick>& majors, const Axis& axis) {
  int labelled = 0;
  for (auto& t : majors) {
    if (t.label.empty()) continue;
    const double at = axis.position(t.value), half = axis.extent(t.label) / 2.0;
    if (at - half < -axis.overhang || at + half > axis.pixels + axis.overhang)
      t.label.clear();
    else
      ++labelled;
  }
  return labelled;
}

// Candidates come finest first. The first with two labels that fit wins; failing that, the first with
// one label. Returns the winner's index (-1: none) and its majors.
struct Choice {
  int index = -1;
  std::vector<AxisTick> majors;
};
template <typename Candidate>
Choice choose(const Axis& axis, int count, Candidate&& candidate) {
  Choice single;
  for (int i = 0; i < count; ++i) {
    std::vector<AxisTick> majors = candidate(i);
    const int labelled = drop_overhanging(majors, axis);
    if (labelled >= 2 && labels_fit(majors, axis.position, axis.gap, axis.extent)) return {i, std::move(majors)};
    if (labelled == 1 && single.index < 0) single = {i, std::move(majors)};
  }
  return single;
}

// The finest step any labels could take: each is at least one character plus the gap wide.
double finest_step(double range, const Axis& axis) {
  return range * std::max(kMinTickPixels, axis.extent("0") + axis.gap) / axis.pixels;
}

// Majors at the finest round step whose labels fit, minors (unlabelled) between them. Shared by the
// linear axis and the within-one-decade log axis, which differ only in where a value lands.
std::vector<AxisTick> round_ticks(double lo, double hi, const TickFormat& format, const Axis& axis) {
  const std::vector<double> steps = round_steps(finest_step(hi - lo, axis), hi - lo);
  Choice choice = choose(axis, static_cast<int>(steps.size()), [&](int i) {
    std::vector<AxisTick> majors;
    for (double v : multiples(lo, hi, steps[i])) majors.push_back({v, format(v), true});
    return majors;
  });
  std::vector<AxisTick>& ticks = choice.majors;
  if (ticks.empty()) return ticks;
  // Minors split a step of 1 or 5 in fifths and a step of 2 in quarters, as graph paper does.
  const double step = steps[choice.index];
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double minor = step / (std::lround(mantissa) == 2 ? 4 : 5);
  if (std::fabs(axis.position(ticks[0].value + minor) - axis.position(ticks[0].value)) >= kMinTickPixels)
    for (double v : multiples(lo, hi, minor))
      if (std::fabs(v / step - std::round(v / step)) > 1e-6) ticks.push_back({v, "", false});
  return ticks;
}

}  // namespace

std::string tick_text(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", value);
  return buf;
}

bool labels_fit(const std::vector<AxisTick>& ticks, const AxisPosition& position, double gap,
                const LabelExtent& extent) {
  std::vector<std::pair<double, double>> spans;  // label start and end along the axis
  for (const auto& t : ticks) {
    if (!t.major || t.label.empty()) continue;
    const double at = position(t.value), half = extent(t.label) / 2.0;
    spans.emplace_back(at - half, at + half);
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first - spans[i - 1].second < gap) return false;
  return true;
}

std::vector<AxisTick> spaced_linear_ticks(double lo, double hi, double pixels, double gap, double overhang,
                                          const TickFormat& format, const LabelExtent& extent) {
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi) || !(pixels > 0)) return {};
  const double scale = pixels / (hi - lo);
  return round_ticks(lo, hi, format, Axis{pixels, gap, overhang, extent, [=](double v) { return (v - lo) * scale; }});
}

std::vector<AxisTick> spaced_integer_ticks(double lo, double hi, double pixels, double gap, double overhang,
                                           const TickFormat& format, const LabelExtent& extent) {
  std::vector<AxisTick> ticks = spaced_linear_ticks(lo, hi, pixels, gap, overhang, format, extent);
  // Zoomed in past one unit the round step becomes 0.5, 0.2 ...: those ticks would name steps and layers that
  // do not exist. Dropping them leaves every whole number (majors stay labelled, so labels only get sparser).
  std::erase_if(ticks, [](const AxisTick& t) { return t.value != std::round(t.value); });
  return ticks;
}

std::vector<AxisTick> spaced_log_ticks(double lo, double hi, double pixels, double gap, double overhang,
                                       const TickFormat& format, const LabelExtent& extent) {
  if (!(hi > lo) || !(lo > 0) || !std::isfinite(hi) || !(pixels > 0)) return {};
  const double l0 = std::log10(lo), l1 = std::log10(hi), scale = pixels / (l1 - l0);
  const Axis axis{pixels, gap, overhang, extent, [=](double v) { return (std::log10(v) - l0) * scale; }};
  const int e0 = static_cast<int>(std::ceil(l0 - 1e-9)), e1 = static_cast<int>(std::floor(l1 + 1e-9));
  if (e1 - e0 < 1) return round_ticks(lo, hi, format, axis);
  auto every = [&](int k, int e) { return ((e % k) + k) % k == 0; };
  Choice choice = choose(axis, e1 - e0 + 1, [&](int i) {
    std::vector<AxisTick> majors;
    for (int e = e0; e <= e1; ++e)
      if (every(i + 1, e)) majors.push_back({std::pow(10.0, e), format(std::pow(10.0, e)), true});
    return majors;
  });
  const int chosen = choice.index + 1;  // every chosen-th decade is labelled
  std::vector<AxisTick>& ticks = choice.majors;
  // Minors: 2..9 x 10^e when every decade is labelled and there is room, else the skipped decades.
  const bool fine =
      chosen == 1 && axis.position(2.0 * std::pow(10.0, e0)) - axis.position(std::pow(10.0, e0)) >= 3 * kMinTickPixels;
  for (int e = e0 - 1; e <= e1 && !ticks.empty(); ++e) {
    if (fine) {
      for (int m = 2; m <= 9; ++m)
        if (m * std::pow(10.0, e) >= lo && m * std::pow(10.0, e) <= hi)
          ticks.push_back({m * std::pow(10.0, e), "", false});
    } else if (e >= e0 && !every(chosen, e)) {
      ticks.push_back({std::pow(10.0, e), "", false});
    }
  }
  return ticks;
}

std::vector<AxisTick> spaced_category_ticks(double lo, double hi, double pixels, double gap, double overhang,
                                            const std::vector<std::string>& names, const LabelExtent& extent) {
  if (!(hi > lo) || !(pixels > 0) || names.empty()) return {};
  const int first = std::max(0, static_cast<int>(std::ceil(lo - 1e-9)));
  const int last = std::min(static_cast<int>(names.size()) - 1, static_cast<int>(std::floor(hi + 1e-9)));
  if (last < first) return {};
  const double scale = pixels / (hi - lo);
  const Axis axis{pixels, gap, overhang, extent, [=](double v) { return (v - lo) * scale; }};
  const std::vector<double> steps = round_steps(1.0, std::max(1.0, static_cast<double>(last - first)));
  Choice choice = choose(axis, static_cast<int>(steps.size()), [&](int i) {
    const int k = static_cast<int>(steps[i]);
    std::vector<AxisTick> majors;
    for (int c = first; c <= last; ++c)
      if (c % k == 0) majors.push_back({static_cast<double>(c), names[c], true});
    return majors;
  });
  std::vector<AxisTick>& ticks = choice.majors;
  const int chosen = choice.index < 0 ? 1 : static_cast<int>(steps[choice.index]);
  for (int c = first; c <= last && !ticks.empty(); ++c)
    if (c % chosen != 0) ticks.push_back({static_cast<double>(c), "", false});
  return ticks;
}

namespace {

LabelExtent font_extent(bool vertical) {
  return [vertical](const std::string& s) {
    const ImVec2 size = ImGui::CalcTextSize(s.c_str());
    return vertical ? size.y : size.x;
  };
}

double label_gap(bool vertical) { return ImGui::GetFontSize() * (vertical ? kLabelGapUpEm : kLabelGapAcrossEm); }

// An x label may reach past the plot area only as far as the y labels keep off it (ImPlot draws them
// LabelPadding.x left of the area), so the first x label never runs into the lowest y label. A y label
// may reach half its height past either end: the x labels start below the area, left of nothing.
double label_overhang(bool vertical) {
  return vertical ? std::numeric_limits<double>::infinity() : ImPlot::GetStyle().LabelPadding.x;
}

TickFormat format_with(ImPlotFormatter formatter, void* data) {
  return [formatter, data](double v) {
    char buf[IMPLOT_LABEL_MAX_SIZE];
    formatter(v, buf, sizeof buf, data);
    return std::string(buf);
  };
}

void add_ticks(ImPlotTicker& ticker, const std::vector<AxisTick>& ticks) {
  for (const auto& t : ticks) ticker.AddTick(t.value, t.major, 0, t.major && !t.label.empty(), t.label.c_str());
}

void linear_locator(ImPlotTicker& ticker, const ImPlotRange& range, float pixels, bool vertical,
                    ImPlotFormatter formatter, void* data) {
  add_ticks(ticker, spaced_linear_ticks(range.Min, range.Max, pixels, label_gap(vertical), label_overhang(vertical),
                                        format_with(formatter, data), font_extent(vertical)));
}

void integer_locator(ImPlotTicker& ticker, const ImPlotRange& range, float pixels, bool vertical,
                     ImPlotFormatter formatter, void* data) {
  add_ticks(ticker, spaced_integer_ticks(range.Min, range.Max, pixels, label_gap(vertical), label_overhang(vertical),
                                         format_with(formatter, data), font_extent(vertical)));
}

void log_locator(ImPlotTicker& ticker, const ImPlotRange& range, float pixels, bool vertical, ImPlotFormatter formatter,
                 void* data) {
  add_ticks(ticker, spaced_log_ticks(range.Min, range.Max, pixels, label_gap(vertical), label_overhang(vertical),
                                     format_with(formatter, data), font_extent(vertical)));
}

int category_format(double value, char* buf, int size, void* data) {
  const auto& names = *static_cast<const std::vector<std::string>*>(data);
  const long i = std::lround(value);
  return std::snprintf(buf, size, "%s", i >= 0 && i < static_cast<long>(names.size()) ? names[i].c_str() : "");
}

void category_locator(ImPlotTicker& ticker, const ImPlotRange& range, float pixels, bool vertical, ImPlotFormatter,
                      void* data) {
  const auto& names = *static_cast<const std::vector<std::string>*>(data);
  add_ticks(ticker, spaced_category_ticks(range.Min, range.Max, pixels, label_gap(vertical), label_overhang(vertical),
                                          names, font_extent(vertical)));
}

int number_format(double value, char* buf, int size, void*) { return std::snprintf(buf, size, "%g", value); }

// Rotated token labels are at most this many ems long (cut with ".."): the band under the plot grows with them.
constexpr float kRotatedLabelEms = 8.0f;

std::string rotated_label(const std::string& token) {
  const float most = kRotatedLabelEms * ImGui::GetFontSize();
  if (ImGui::CalcTextSize(token.c_str()).x <= most) return token;
  std::string cut = token;
  while (!cut.empty() && ImGui::CalcTextSize((cut + "..").c_str()).x > most) cut.pop_back();
  // Never end inside a UTF-8 sequence.
  while (!cut.empty() && (static_cast<unsigned char>(cut.back()) & 0xC0) == 0x80) cut.pop_back();
  if (!cut.empty() && (static_cast<unsigned char>(cut.back()) & 0x80)) cut.pop_back();
  return cut + "..";
}

// Token text under each cell (ticks at p + 0.5) once every visible cell is wide (or tall) enough for its
// label; on the x axis, cells a line wide but too narrow for their text across get it turned upright
// (draw_rotated_token_labels); numbers at round steps before that.
void token_locator(ImPlotTicker& ticker, const ImPlotRange& range, float pixels, bool vertical, ImPlotFormatter,
                   void* data) {
  const auto& names = *static_cast<const std::vector<std::string>*>(data);
  const double lo = range.Min, hi = range.Max;
  const int first = std::max(0, static_cast<int>(std::ceil(lo - 0.5))),
            last = std::min(static_cast<int>(names.size()) - 1, static_cast<int>(std::floor(hi - 0.5)));
  constexpr int kMostLabels = 200;  // beyond this many cells no screen gives each a readable label
  if (hi > lo && last >= first && last - first < kMostLabels) {
    const double cell = pixels / (hi - lo);
    const LabelExtent extent = font_extent(vertical);
    const double room = vertical ? ImGui::GetFontSize() * 1.05 : ImGui::GetFontSize() * 0.4;
    bool fits = true;
    for (int c = first; c <= last && fits; ++c) fits = cell >= extent(names[c]) + (vertical ? 0.0 : room);
    if (vertical) fits = fits && cell >= room;
    if (fits) {
      for (int c = first; c <= last; ++c) ticker.AddTick(c + 0.5, true, 0, true, names[c].c_str());
      return;
    }
    if (!vertical && cell >= ImGui::GetFontSize() * 1.05) {
      // Upright labels: ImPlot draws an empty text for each, while the tick's size reserves the band under the
      // plot that draw_rotated_token_labels writes the tokens into (an empty shown label marks the mode).
      for (int c = first; c <= last; ++c) {
        ImPlotTick tick(c + 0.5, true, 0, true);
        tick.TextOffset = ticker.TextBuffer.size();
        ticker.TextBuffer.append("", "" + 1);
        tick.LabelSize = ImVec2(ImGui::GetFontSize(), ImGui::CalcTextSize(rotated_label(names[c]).c_str()).x);
        ticker.AddTick(tick);
      }
      return;
    }
  }
  integer_locator(ticker, range, pixels, vertical, number_format, nullptr);  // positions are whole numbers
}

}  // namespace

void use_token_ticks(ImAxis axis, const std::vector<std::string>& tokens) {
  ImPlot::SetupAxisFormat(axis, number_format, const_cast<std::vector<std::string>*>(&tokens));
  ImPlot::GetCurrentPlot()->Axes[axis].Locator = token_locator;
}

void draw_rotated_token_labels(ImAxis axis, const std::vector<std::string>& tokens) {
  const ImPlotPlot* plot = ImPlot::GetCurrentPlot();
  if (!plot) return;
  const ImPlotAxis& ax = plot->Axes[axis];
  const ImPlotTicker& ticker = ax.Ticker;
  if (!ax.HasTickLabels() || ticker.TickCount() == 0) return;
  for (int t = 0; t < ticker.TickCount(); ++t)
    if (ticker.Ticks[t].ShowLabel && ticker.TextBuffer.Buf.Data[ticker.Ticks[t].TextOffset] != '\0') return;  // across
  ImDrawList* dl = ImPlot::GetPlotDrawList();
  const float line = ImGui::GetFontSize();
  const float top = ax.Datum1 + ImPlot::GetStyle().LabelPadding.y;
  const ImU32 colour = ImGui::GetColorU32(ImGuiCol_Text);
  // Glyphs are culled against the clip rectangle where they are laid out (across, before turning): lay them out
  // unclipped, then turn the new vertices. They land in the band ImPlot reserved for these ticks.
  dl->PushClipRectFullScreen();
  for (int t = 0; t < ticker.TickCount(); ++t) {
    const ImPlotTick& tick = ticker.Ticks[t];
    const int c = static_cast<int>(std::floor(tick.PlotPos));
    if (!tick.ShowLabel || c < 0 || c >= static_cast<int>(tokens.size())) continue;
    if (tick.PixelPos < plot->PlotRect.Min.x - 1 || tick.PixelPos > plot->PlotRect.Max.x + 1) continue;
    const std::string text = rotated_label(tokens[static_cast<std::size_t>(c)]);
    const float width = tick.LabelSize.y;  // the text's length across, measured when the locator placed the tick
    const ImVec2 origin(tick.PixelPos - 0.5f * line, top);
    const int first_vertex = dl->VtxBuffer.Size;
    dl->AddText(origin, colour, text.c_str());
    // A quarter turn anticlockwise about the origin, then down by the text's length: the text reads upwards
    // and ends just under the axis, centred on its cell (as matplotlib's rotation=90).
    for (int v = first_vertex; v < dl->VtxBuffer.Size; ++v) {
      ImDrawVert& vert = dl->VtxBuffer[v];
      const float across = vert.pos.x - origin.x, down = vert.pos.y - origin.y;
      vert.pos = ImVec2(origin.x + down, origin.y + width - across);
    }
  }
  dl->PopClipRect();
}

void use_spaced_ticks(ImAxis axis) {
  ImPlotAxis& ax = ImPlot::GetCurrentPlot()->Axes[axis];
  if (ax.Scale == ImPlotScale_Linear)
    ax.Locator = linear_locator;
  else if (ax.Scale == ImPlotScale_Log10)
    ax.Locator = log_locator;
}

void use_integer_ticks(ImAxis axis) { ImPlot::GetCurrentPlot()->Axes[axis].Locator = integer_locator; }

void use_category_ticks(ImAxis axis, const std::vector<std::string>& names) {
  ImPlot::SetupAxisFormat(axis, category_format, const_cast<std::vector<std::string>*>(&names));
  ImPlot::GetCurrentPlot()->Axes[axis].Locator = category_locator;
}

}  // namespace kvscope::viewers
