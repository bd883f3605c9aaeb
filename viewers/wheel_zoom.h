#pragma once
// How far one wheel notch zooms a plot. ImPlot's default (ZoomRate 0.1) scales the view by 1.2 per wheel event
// whatever the event's size, so notches that arrive within one frame count once: from a 3,000-token map to 40
// tokens took about 50 notches (issue 38). Here a notch scales by kWheelZoomFactor and an event of several notches
// by that factor to their number, so about 10 notches reach 40 tokens from 3,000 at any frame rate.
namespace kvscope::viewers {

// 75^(1/10): 3,000 / 40 = 75 in 10 notches.
inline constexpr double kWheelZoomFactor = 1.5399265;

// ImPlot's ZoomRate for a frame whose wheel moved `wheel` notches (ImGuiIO::MouseWheel): ImPlot scales the view by
// 1 + 2 * rate (out) or 1 / (1 + 2 * rate) (in), so the rate is (F^|wheel| - 1) / 2.
float wheel_zoom_rate(float wheel);

// The visible span after `notches` notches in (positive) or out from `span`, as ImPlot applies the rate above one
// event at a time.
double span_after_notches(double span, int notches);

}  // namespace kvscope::viewers
