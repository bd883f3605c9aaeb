#pragma once
// How a policy spread its budget over layers: the prompt budget per layer of every run side by side (the
// same quantity for every policy; decode growth is listed apart, viewers/layer_budget_report.h),
// or any of the active run's diagnostic series that runs over layers (CAKE's budgets after each cascade
// stage, D2O's capacities, DynamicKV's allocation per update, ...), one line per stage/step.
#include <map>
#include <memory>

#include "viewers/layer_budget_report.h"
#include "viewers/panel.h"

namespace kvscope::viewers {

class BudgetPlot final : public Panel {
 public:
  BudgetPlot() : Panel("budget", "Budgets") {}
  void draw(AppState& state) override;
  Figure figure(const AppState& state) override;

  std::string series;  // empty: prompt budgets of all runs

 private:
  LinePlot build(const AppState& state) const;
  void draw_decode_growth(const AppState& state);
  // Each finished run's report, computed once (a replay of its cache per layer and KV head); the key holds
  // the run alive, so an address is never reused for another run while cached.
  const LayerBudgetReport& report(const std::shared_ptr<const trace::RunTrace>& run);
  std::map<std::shared_ptr<const trace::RunTrace>, LayerBudgetReport> reports_;
};

// Names of a run's diagnostic series with a "layer" dimension.
std::vector<std::string> layer_series_names(const trace::RunTrace& run);
// Lines for one series: {layer} -> one line; {rows, layer} -> one line per row (at most max_lines, evenly
// picked, the last row always included); {layer, part} -> one line per part.
std::vector<LineSeries> series_lines(const policy::Series& s, int max_lines = 12);

}  // namespace kvscope::viewers
