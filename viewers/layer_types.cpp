#include "viewers/layer_types.h"

namespace kvscope::viewers {

std::vector<std::string> layer_tick_labels(const trace::RunTrace& run) {
  std::vector<std::string> labels;
  bool any_local = false;
  for (int l = 0; l < run.n_layers; ++l) {
    const bool local = run.layer_window(l) > 0;
    any_local = any_local || local;
    labels.push_back(std::to_string(l) + (local ? "w" : ""));
  }
  if (!any_local) labels.clear();
  return labels;
}

std::string layer_types_text(const trace::RunTrace& run) {
  int local = 0, window = 0;
  for (int l = 0; l < run.n_layers; ++l)
    if (run.layer_window(l) > 0) {
      ++local;
      window = run.layer_window(l);
    }
  if (local == 0) return "";
  return std::to_string(local) + " of " + std::to_string(run.n_layers) +
         " layers are sliding-window layers (ticks marked w; window " + std::to_string(window) + " tokens)";
}

void mark_layer_types(const trace::RunTrace& run, LinePlot& plot) { plot.x_tick_labels = layer_tick_labels(run); }

}  // namespace kvscope::viewers
