#pragma once
// Cosine similarity between the cached keys (or values) of one (layer, KV head) at the end of prefill:
// the redundancy that merging policies (D2O, KVMerger, CaM) exploit. Diverging colours centred on 0.
#include "viewers/panel.h"

namespace kvscope::viewers {

class SimilarityMap final : public Panel {
 public:
  SimilarityMap() : Panel("similarity", "Similarity") {}
  void draw(AppState& state) override;
  Figure figure(const AppState& state) override;

  bool values = false;    // value vectors instead of keys
  bool fit_range = false; // fit the colour range to the data instead of [-1, 1]
  int kv_head = -1;  // -1: the selected query head's KV head (the window); >= 0: this one (kvscope figure --kv-head)

 private:
  const HeatmapPlot* plot(const AppState& state);
  std::string signature_, why_;
  HeatmapPlot cached_;
  bool have_plot_ = false;
};

// The colour range of "fit range": the lowest to the highest value of the cells off the diagonal (cells whose rows
// and columns share no entry), since every diagonal cosine is 1 and would pin the top. [-1, 1] when none differ.
ColorScale off_diagonal_range(const trace::Map2D& map);
bool similarity_plot(const trace::RunTrace& run, int layer, int kv_head, bool values, bool fit_range, int max_cells,
                     HeatmapPlot& out, std::string& why);

}  // namespace kvscope::viewers
