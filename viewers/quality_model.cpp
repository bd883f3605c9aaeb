#include "viewers/quality_model.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/common/error.h"
#include "core/eval/sweep_summary.h"
#include "core/policy/budget_spec.h"
#include "viewers/quality_plot.h"

namespace kvscope::viewers {

bool budget_less(const std::string& a, const std::string& b) {
  return std::tuple(budget_key(a), a) < std::tuple(budget_key(b), b);
}

void QualityCurves::add(eval::SweepRow row) {
  if (std::find(policies.begin(), policies.end(), row.series()) == policies.end()) policies.push_back(row.series());
  if (std::find(budgets.begin(), budgets.end(), row.budget) == budgets.end()) {
    budgets.insert(std::upper_bound(budgets.begin(), budgets.end(), row.budget, budget_less), row.budget);
  }
  for (const auto& [name, value] : row.metrics)
    if (std::find(metrics.begin(), metrics.end(), name) == metrics.end()) metrics.push_back(name);
  std::erase_if(rows, [&](const eval::SweepRow& r) { return r.cell == row.cell && r.prompt == row.prompt; });
  rows.push_back(std::move(row));
}

double QualityCurves::mean(const std::string& policy, const std::string& budget, const std::string& metric) const {
  return eval::cell_mean(rows, policy, budget, metric);
}

QualityCurves quality_curves(const eval::SweepTable& table) {
  if (table.rows.empty()) throw Error("sweep file '" + table.path.string() + "' has no rows yet");
  QualityCurves c;
  c.source = table.path.string();
  c.eval_kind = table.eval_kind;
  c.metrics = table.metrics;
  for (const auto& row : table.rows) c.add(row);
  return c;
}

std::string default_metric(const QualityCurves& curves) {
  for (const char* preferred : {"top1_agreement", "ppl", "exact_match"})
    if (std::find(curves.metrics.begin(), curves.metrics.end(), preferred) != curves.metrics.end()) return preferred;
  return curves.metrics.empty() ? "" : curves.metrics.front();
}

std::optional<double> budget_position(const QualityCurves& curves, const std::string& budget) {
  if (budget.empty()) return std::nullopt;
  const auto& b = curves.budgets;
  const BudgetAxis axis = budget_axis(b);
  for (std::size_t i = 0; i < b.size(); ++i)
    if (b[i] == budget) return axis.x[i];
  const auto key = budget_key(budget);
  if (key.first == 2) return std::nullopt;
  for (std::size_t i = 0; i + 1 < b.size(); ++i) {
    const auto lo = budget_key(b[i]), hi = budget_key(b[i + 1]);
    if (lo.first != key.first || hi.first != key.first || key.second < lo.second || key.second > hi.second) continue;
    // Linear in value between the two budgets' places (on a numeric axis: the budget's own value).
    return axis.x[i] + (axis.x[i + 1] - axis.x[i]) * (key.second - lo.second) / (hi.second - lo.second);
  }
  return std::nullopt;
}

std::optional<QualityPoint> point_near(const QualityCurves& curves, const std::string& metric, double x, double y,
                                       double x_units_per_px, double y_units_per_px, double radius_px) {
  std::optional<QualityPoint> best;
  double best_d2 = radius_px * radius_px;
  const BudgetAxis axis = budget_axis(curves.budgets);
  for (const auto& policy : curves.policies)
    for (std::size_t i = 0; i < curves.budgets.size(); ++i) {
      const double v = curves.mean(policy, curves.budgets[i], metric);
      if (std::isnan(v)) continue;
      const double dx = (axis.x[i] - x) / x_units_per_px, dy = (v - y) / y_units_per_px;
      const double d2 = dx * dx + dy * dy;
      if (d2 <= best_d2) {
        best_d2 = d2;
        best = QualityPoint{policy, curves.budgets[i], axis.x[i], v};
      }
    }
  return best;
}

Figure quality_figure(const QualityCurves& curves, const std::string& metric, const std::string& baseline,
                      bool log_y) {
  const std::string kind = curves.eval_kind.empty() ? "sweep" : curves.eval_kind;
  if (!baseline.empty())
    return quality_difference_vs_budget(curves.rows, curves.policies, curves.budgets, metric, baseline,
                                        metric + " minus " + baseline + " vs budget (" + kind + ")");
  Figure fig =
      quality_vs_budget(curves.rows, curves.policies, curves.budgets, metric, metric + " vs budget (" + kind + ")");
  if (log_y && log_scale_possible(curves, metric, baseline)) std::get<LinePlot>(fig.parts.front()).log_y = true;
  return fig;
}

bool log_scale_possible(const QualityCurves& curves, const std::string& metric, const std::string& baseline) {
  if (!baseline.empty()) return false;
  bool any = false;
  for (const auto& policy : curves.policies)
    for (const auto& budget : curves.budgets) {
      const auto ci = eval::cell_interval(curves.rows, policy, budget, metric);
      if (!ci) continue;
      if (!(ci->mean > 0 && ci->low > 0 && ci->high > 0)) return false;
      any = true;
    }
  return any;
}

}  // namespace kvscope::viewers
