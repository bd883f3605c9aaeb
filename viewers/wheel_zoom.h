#pragma once
// How far one wheel notch zooms a plot. ImPlot zooms in by (1 + r) / (1 + 2 r) and out by (1 + r) per wheel event,
// r its ZoomRate, whatever the event's size: at its default (0.1) a notch zoomed in by 8 %, and a 3,000-token map
// took 50 notches to reach 40 tokens (issue 38). Here a notch scales the view by kWheelZoomFactor in and out, and an
// event of several notches (they arrived within one frame) by that factor to their number, so about 10 notches reach
// 40 tokens from 3,000.
namespace kvscope::viewers {

// 75^(1/10): 3,000 / 40 = 75 in 10 notches.
inline constexpr double kWheelZoomFactor = 1.5399265;

// ImPlot's ZoomRate for a frame whose wheel moved `wheel` notches (ImGuiIO::MouseWheel; positive zooms in). One
// ImPlot event zooms in by at most a factor 2 (r -> infinity), so notches that arrived together zoom in by at most 1.9.
float wheel_zoom_rate(float wheel);

// The visible span after `notches` wheel events of one notch each, in (positive) or out (negative), as ImPlot applies
// the rate above (implot.cpp, SCROLL INPUT) with the pointer at `pointer` (0..1 across the plot).
double span_after_notches(double span, int notches, double pointer = 0.5);

}  // namespace kvscope::viewers
