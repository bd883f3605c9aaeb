#pragma once
// One number per layer for every run: attention entropy, column variance, CAKE's preference score,
// the allocated budget, ... Per-(layer, head) statistics show their head mean with a min..max band.
// Clicking a layer selects it in every panel.
#include "viewers/panel.h"

namespace kvscope::viewers {

class LayerStatsPlot final : public Panel {
 public:
  LayerStatsPlot() : Panel("layer_stats", "Layer stats") {}
  void draw(AppState& state) override;
  Figure figure(const AppState& state) override;

  std::string stat;        // chosen statistic; empty: the first available
  bool all_runs = true;    // every run with the same layer count, or only the active run
  bool bands = true;

 private:
  LinePlot build(const AppState& state) const;
};

// Statistic names across runs: per-(layer, head) stats, per-layer stats, then "layer_budget", then
// "router_load_entropy" (mixture-of-experts runs, core/analysis/router_load.h).
std::vector<std::string> layer_stat_names(const std::vector<const trace::RunTrace*>& runs);
std::string default_layer_stat(const std::vector<std::string>& names);
// One series for `run` (false when the run lacks it). Budgets come from layer_budgets.
bool layer_stat_series(const trace::RunTrace& run, const std::string& name, bool band, LineSeries& out,
                       std::string* description = nullptr);

}  // namespace kvscope::viewers
