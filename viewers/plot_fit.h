#pragma once
// Fitting plot axes beyond what ImPlot does by itself (issue 25). A fitted axis keeps a margin, so end points,
// markers and bars do not sit on the plot border; the margin is taken in the axis's own scale (log10 for a log
// axis, where a linear margin would reach below zero). And marks drawn beside ImPlot's items (the key strip
// under an attention map) take part in the fit, so a double-click or a data change does not push them out of
// view. Both act only in a frame where ImPlot fits (the data changed, a double-click, SetNextAxesToFit), and
// are called between SetupFinish and EndPlot, after the plot's items.

namespace kvscope::viewers {

// Widens each axis that fits this frame by `fraction` of its fitted span at both ends.
void pad_fitted_axes(double fraction);

// Makes the Y1 axis's fit this frame reach y as well.
void fit_y_to_include(double y);

}  // namespace kvscope::viewers
