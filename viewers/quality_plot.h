#pragma once
// Figures of evaluation results: quality against budget with one curve per policy (the papers' budget
// plots), and the needle-in-a-haystack grid (context length x needle depth, the papers' NIAH maps).
#include <string>
#include <utility>
#include <vector>

#include "core/eval/sweep_store.h"
#include "viewers/figure.h"

namespace kvscope::viewers {

// A budget's (unit, value): 0 for shares of the prompt (value a fraction, "25%" -> 0.25), 1 for token counts,
// 2 for text that is no budget (value 0).
std::pair<int, double> budget_key(const std::string& budget);

// Where budgets sit on a quality plot's x axis. When every budget has one unit, at its value (shares in %, or
// tokens), so 10%, 25% and 50% are spaced as the numbers they are; mixed units or text, at their index, named
// as categories (the order given).
struct BudgetAxis {
  std::vector<double> x;  // per budget
  bool categorical = true;
  std::string label;      // the axis title, naming the unit
};
BudgetAxis budget_axis(const std::vector<std::string>& budgets);

// One curve per policy over the budgets in the order given, each point the mean of `metric` over the
// prompts that have that (policy, budget). Throws Error when no row has the metric.
// Each policy's paired difference to `baseline` (policy - baseline over the prompts both have) per budget,
// with its 95 % bootstrap band: the "A - B" view of a sweep. Throws Error when no pair exists.
Figure quality_difference_vs_budget(const std::vector<eval::SweepRow>& rows, const std::vector<std::string>& policies,
                                    const std::vector<std::string>& budgets, const std::string& metric,
                                    const std::string& baseline, const std::string& title);

Figure quality_vs_budget(const std::vector<eval::SweepRow>& rows, const std::vector<std::string>& policies,
                         const std::vector<std::string>& budgets, const std::string& metric, const std::string& title);

// scores[depth][length] in [0, 1] (1 = retrieved). Rows are depths top to bottom, columns lengths.
Figure needle_grid(const std::vector<std::vector<double>>& scores, const std::vector<int>& lengths,
                   const std::vector<double>& depths, const std::string& title);

}  // namespace kvscope::viewers
