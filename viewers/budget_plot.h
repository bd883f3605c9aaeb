#pragma once
// How a policy spread its budget over layers: the final per-layer budgets of every run side by side,
// or any of the active run's diagnostic series that runs over layers (CAKE's budgets after each cascade
// stage, D2O's capacities, DynamicKV's allocation per update, ...), one line per stage/step.
#include "viewers/panel.h"

namespace kvscope::viewers {

class BudgetPlot final : public Panel {
 public:
  BudgetPlot() : Panel("budget", "Budgets") {}
  void draw(AppState& state) override;
  Figure figure(const AppState& state) override;

  std::string series;  // empty: final budgets of all runs

 private:
  LinePlot build(const AppState& state) const;
};

// Names of a run's diagnostic series with a "layer" dimension.
std::vector<std::string> layer_series_names(const trace::RunTrace& run);
// Lines for one series: {layer} -> one line; {rows, layer} -> one line per row (at most max_lines, evenly
// picked, the last row always included); {layer, part} -> one line per part.
std::vector<LineSeries> series_lines(const policy::Series& s, int max_lines = 12);

}  // namespace kvscope::viewers
