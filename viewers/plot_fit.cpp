#include "viewers/plot_fit.h"

#include <implot.h>
#include <implot_internal.h>

namespace kvscope::viewers {

void pad_fitted_axes(double fraction) {
  ImPlotPlot* plot = ImPlot::GetCurrentPlot();
  if (!plot || !plot->FitThisFrame) return;
  for (int a = 0; a < ImAxis_COUNT; ++a) {
    ImPlotAxis& axis = plot->Axes[a];
    // An axis whose limits are set every frame (category slots) is locked: ApplyFit leaves it alone anyway.
    if (!axis.Enabled || !axis.FitThisFrame || !(axis.FitExtents.Min <= axis.FitExtents.Max)) continue;
    const auto forward = [&](double v) { return axis.TransformForward ? axis.TransformForward(v, axis.TransformData) : v; };
    const auto inverse = [&](double v) { return axis.TransformInverse ? axis.TransformInverse(v, axis.TransformData) : v; };
    const double lo = forward(axis.FitExtents.Min), hi = forward(axis.FitExtents.Max);
    // A single value (one point, a flat line) has no span: ApplyFit gives it +-0.5 by itself.
    const double margin = (hi - lo) * fraction;
    if (!(margin > 0)) continue;
    axis.FitExtents.Min = inverse(lo - margin);
    axis.FitExtents.Max = inverse(hi + margin);
  }
}

void fit_y_to_include(double y) {
  ImPlotPlot* plot = ImPlot::GetCurrentPlot();
  if (plot && plot->FitThisFrame && plot->Axes[ImAxis_Y1].FitThisFrame) plot->Axes[ImAxis_Y1].ExtendFit(y);
}

}  // namespace kvscope::viewers
