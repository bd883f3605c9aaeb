#pragma once
// How an exported figure looks, apart from what it shows: the window's own look (kvscope) or matplotlib's
// defaults, so a figure can sit next to a paper's other plots. Both are white, frameless, in DejaVu Sans.
#include <string>

#include "viewers/image.h"

namespace kvscope::viewers {

enum class FigureLook { Kvscope, Matplotlib };

// "kvscope" or "matplotlib"; throws UsageError naming both for anything else.
FigureLook parse_figure_look(const std::string& name);

// The series colours of a look: seaborn's "deep" (ImPlot's Deep, the window's) or matplotlib's tab10.
// A series index of its own: near-black ink in every look, for marks drawn over the palette's curves (the Pareto
// front), which a palette index would give the colour of a curve once the series outnumber the palette.
constexpr int kInkSeries = -2;
Rgba look_series_color(FigureLook look, int index);

}  // namespace kvscope::viewers
