#pragma once
// A model's layer types on every layer axis: a sliding-window ("local") layer's tick reads "3w", a global
// layer's "5", so that plots over layers (Budgets, layer statistics, evidence) tell local from global layers
// (Gemma 2 / 3; trace::RunTrace::layer_windows). Runs without local layers keep the plain integer axis.
#include <string>
#include <vector>

#include "core/trace/trace_view.h"
#include "viewers/figure.h"

namespace kvscope::viewers {

// One label per layer, or empty when the run has no sliding-window layers.
std::vector<std::string> layer_tick_labels(const trace::RunTrace& run);

// "5 of 6 layers are sliding-window layers (ticks marked w; window 8 tokens)", or "" without them.
std::string layer_types_text(const trace::RunTrace& run);

// Marks the local layers of `run` on a plot whose x axis is the layer.
void mark_layer_types(const trace::RunTrace& run, LinePlot& plot);

}  // namespace kvscope::viewers
