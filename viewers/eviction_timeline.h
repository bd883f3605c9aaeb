#pragma once
// What became of every cache entry over the run: positions across, recorded steps (prefill blocks,
// then decode steps) down; each cell kept, evicted, merged or not yet in the cache, for one
// (layer, KV head), or the share of all (layer, KV head) caches that still hold the position.
#include "viewers/panel.h"

namespace kvscope::viewers {

class EvictionTimeline final : public Panel {
 public:
  EvictionTimeline() : Panel("timeline", "Eviction timeline") {}
  void draw(AppState& state) override;
  Figure figure(const AppState& state) override;

  bool aggregate = false;  // share kept over all (layer, kv head) instead of one cache
  int kv_head = -1;  // -1: the selected query head's KV head (the window); >= 0: this one (kvscope figure --kv-head)

 private:
  const HeatmapPlot* plot(const AppState& state);
  std::string signature_, why_;
  HeatmapPlot cached_;
  bool have_plot_ = false;
};

// [steps][positions] categories for one cache, or the kept share over all caches when aggregate.
// Below this height (pixels, at font size `font`) the panel drops the plot's title and axis names.
inline float timeline_compact_height(float font) { return 12.0f * font; }

bool timeline_plot(const trace::RunTrace& run, int layer, int kv_head, bool aggregate, HeatmapPlot& out, std::string& why);

}  // namespace kvscope::viewers
