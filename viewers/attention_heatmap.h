#pragma once
// Prefill attention of one (layer, query head) as a heatmap (queries down, keys across), or the decode
// attention rows (one per generated token). Keys the policy evicted or merged by the end of the run are
// marked under the map; hovering names the query token, the key token and the probability. A run recorded
// with q/k (`--record qk=on`) is redrawn exactly when zoomed in (the visible region rebuilt from q/k at the
// screen's resolution, core/trace/exact_attention.h) and its tooltip gives the single cell's exact probability;
// without them the pooled map is all there is, and the panel says so.
#include <memory>

#include "core/trace/exact_attention.h"
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
  // The visible region rebuilt from q/k and drawn over the overview (inside the plot); null when the run has
  // no q/k or the region holds too many cells to rebuild at once.
  void draw_exact_region(const AppState& state, const HeatmapPlot& overview);
  std::string signature_;
  HeatmapPlot cached_;
  bool have_plot_ = false;
  std::shared_ptr<const trace::RunTrace> exact_run_;  // keeps the run exact_ reads alive
  std::unique_ptr<trace::ExactAttention> exact_;      // for the shown run, layer and head (null: no q/k)
  std::string region_signature_;
  HeatmapPlot region_;
  bool region_shown_ = false;
};

// Cells a zoomed view rebuilds from q/k per redraw, at most (about 40 ms on one core of this machine at
// head_dim 64); a view showing more stays on the pooled overview.
inline constexpr long kMaxExactCells = 1L << 20;

// The heatmap of exactly queries [q0, q1) x keys [k0, k1) rebuilt from the run's q/k (`kvscope figure --queries
// --keys`), pooled only where the figure has fewer than max_rows x max_cols cells for it; token text names the
// cells once they are wide enough. Throws Error when the run has no q/k, UsageError for ranges outside it.
HeatmapPlot exact_attention_plot(const trace::RunTrace& run, const Selection& sel, int q0, int q1, int k0, int k1,
                                 int max_rows, int max_cols, ScaleKind scale, Colormap cmap);

// The heatmap of a run's attention for `sel`, as drawn and exported (also used by compare_view and
// `kvscope figure`). Returns false, with `why` set, when the run has no such map.
bool attention_plot(const trace::RunTrace& run, const Selection& sel, bool decode, bool marks, ScaleKind scale,
                    Colormap cmap, int max_cells, HeatmapPlot& out, std::string& why);

// Hover read-out for a map of positions: query/key tokens, value, and the key's fate.
// With `exact`, the cell under the pointer is one query and one key, with its exact probability.
void attention_tooltip(const trace::RunTrace& run, const HeatmapPlot& plot, const Selection& sel, bool decode,
                       const trace::ExactAttention* exact = nullptr);

}  // namespace kvscope::viewers
