#pragma once
// Prefill attention of one (layer, query head) as a heatmap (queries down, keys across), or the decode
// attention rows (one per generated token). Keys the policy evicted or merged by the end of the run are
// marked under the map; hovering names the query token, the key token and the probability.
#include "viewers/panel.h"

namespace kvscope::viewers {

class AttentionHeatmap final : public Panel {
 public:
  AttentionHeatmap() : Panel("attention", "Attention") {}
  void draw(AppState& state) override;
  Figure figure(const AppState& state) override;

  bool decode = false;     // decode rows instead of the prefill map
  bool show_marks = true;  // evicted/merged key strip
  int max_cells = 1024;    // texture edge; larger maps are pooled further for display

 private:
  const HeatmapPlot* plot(const AppState& state);
  std::string signature_;
  HeatmapPlot cached_;
  bool have_plot_ = false;
};

// The heatmap of a run's attention for `sel`, as drawn and exported (also used by compare_view and
// `kvscope figure`). Returns false, with `why` set, when the run has no such map.
bool attention_plot(const trace::RunTrace& run, const Selection& sel, bool decode, bool marks, ScaleKind scale,
                    Colormap cmap, int max_cells, HeatmapPlot& out, std::string& why);

// Hover read-out for a map of positions: query/key tokens, value, and the key's fate.
void attention_tooltip(const trace::RunTrace& run, const HeatmapPlot& plot, const Selection& sel, bool decode);

}  // namespace kvscope::viewers
