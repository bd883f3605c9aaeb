#include "viewers/quality_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/common/error.h"
#include "core/eval/sweep_summary.h"
#include "core/policy/budget_spec.h"

namespace kvscope::viewers {

std::pair<int, double> budget_key(const std::string& budget) {
  try {
    const auto spec = policy::BudgetSpec::parse(budget);
    // Shares and compression ratios on one axis: the share of the prompt kept.
    return {spec.relative() ? 0 : 1, spec.relative() ? spec.kept_share() : spec.value};
  } catch (const std::exception&) {
    return {2, 0.0};
  }
}

BudgetAxis budget_axis(const std::vector<std::string>& budgets) {
  BudgetAxis axis;
  const int unit = budgets.empty() ? 2 : budget_key(budgets.front()).first;
  const bool one_unit = unit != 2 && std::all_of(budgets.begin(), budgets.end(),
                                                 [&](const std::string& b) { return budget_key(b).first == unit; });
  axis.categorical = !one_unit;
  axis.label = !one_unit ? "budget" : unit == 0 ? "budget (% of the prompt kept)" : "budget (tokens per layer and KV head)";
  for (std::size_t i = 0; i < budgets.size(); ++i)
    axis.x.push_back(!one_unit ? static_cast<double>(i) : budget_key(budgets[i]).second * (unit == 0 ? 100.0 : 1.0));
  return axis;
}

namespace {

// The budget axis of a quality plot: numbers where the budgets share a unit, categories otherwise.
void set_budget_axis(LinePlot& plot, const BudgetAxis& axis, const std::vector<std::string>& budgets) {
  plot.x_label = axis.label;
  if (axis.categorical) plot.x_tick_labels = budgets;
}

// What the bands are, for the title: a point over one prompt has no interval, and saying "bands" then would
// promise what the plot cannot show.
std::string band_note(int most_prompts, const char* what) {
  if (most_prompts <= 1) return " (one prompt per point: no intervals)";
  return std::string(" (bands: 95% bootstrap intervals ") + what + ", up to " + std::to_string(most_prompts) + " prompts)";
}

// A band only where a point has more than one prompt; one prompt draws none.
void add_point(LineSeries& s, double x, const eval::Interval& ci) {
  s.x.push_back(x);
  s.y.push_back(ci.mean);
  s.y_low.push_back(ci.n > 1 ? ci.low : std::nan(""));
  s.y_high.push_back(ci.n > 1 ? ci.high : std::nan(""));
}

}  // namespace

Figure quality_vs_budget(const std::vector<eval::SweepRow>& rows, const std::vector<std::string>& policies,
                         const std::vector<std::string>& budgets, const std::string& metric, const std::string& title) {
  LinePlot plot;
  plot.y_label = metric;
  int most_prompts = 0;
  const BudgetAxis axis = budget_axis(budgets);
  set_budget_axis(plot, axis, budgets);
  bool any = false;
  const std::vector<SeriesStyle> styles = sweep_series_styles(policies);
  for (std::size_t p = 0; p < policies.size(); ++p) {
    const std::string& policy = policies[p];
    LineSeries s;
    s.name = policy;
    s.color = styles[p].color, s.marker = styles[p].marker, s.dash = styles[p].dash;
    for (std::size_t b = 0; b < budgets.size(); ++b) {
      const auto ci = eval::cell_interval(rows, policy, budgets[b], metric);
      if (!ci) continue;
      add_point(s, axis.x[b], *ci);  // the shaded band: a 95 % bootstrap interval over the prompts
      most_prompts = std::max(most_prompts, ci->n);
      any = true;
    }
    plot.series.push_back(std::move(s));
  }
  if (!any) throw Error("no sweep row has the metric '" + metric + "'");
  plot.title = title + band_note(most_prompts, "over prompts");
  plot.legend_outside = true;  // curves reach every corner of a quality plot: the legend goes beside it
  Figure fig;
  fig.title = title;
  fig.parts.push_back(std::move(plot));
  return fig;
}

Figure quality_difference_vs_budget(const std::vector<eval::SweepRow>& rows, const std::vector<std::string>& policies,
                                    const std::vector<std::string>& budgets, const std::string& metric,
                                    const std::string& baseline, const std::string& title) {
  LinePlot plot;
  plot.y_label = metric + " minus " + baseline;
  int most_prompts = 0;
  const BudgetAxis axis = budget_axis(budgets);
  set_budget_axis(plot, axis, budgets);
  bool any = false;
  const std::vector<SeriesStyle> styles = sweep_series_styles(policies);
  for (std::size_t p = 0; p < policies.size(); ++p) {
    if (policies[p] == baseline) continue;
    LineSeries s;
    s.name = policies[p] + " - " + baseline;
    // The series keeps its colour, marker and dash from the plain view.
    s.color = styles[p].color, s.marker = styles[p].marker, s.dash = styles[p].dash;
    for (std::size_t b = 0; b < budgets.size(); ++b) {
      const auto d = eval::paired_interval(rows, policies[p], baseline, budgets[b], metric);
      if (!d) continue;
      add_point(s, axis.x[b], *d);
      most_prompts = std::max(most_prompts, d->n);
      any = true;
    }
    plot.series.push_back(std::move(s));
  }
  if (!any) throw Error("no prompt has both a " + baseline + " row and another policy's row for '" + metric + "'");
  plot.title = title + band_note(most_prompts, "of the paired difference");
  plot.legend_outside = true;
  Figure fig;
  fig.title = title;
  fig.parts.push_back(std::move(plot));
  return fig;
}

Figure needle_grid(const std::vector<std::vector<double>>& scores, const std::vector<int>& lengths,
                   const std::vector<double>& depths, const std::string& title) {
  HeatmapPlot p;
  p.title = title;
  std::string columns, rows;
  for (int l : lengths) columns += (columns.empty() ? "" : ", ") + std::to_string(l);
  for (double d : depths) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.0f%%", d * 100.0);
    rows += (rows.empty() ? "" : ", ") + std::string(buf);
  }
  p.x_label = "context tokens (" + columns + ")";
  p.y_label = "needle depth (" + rows + ", top to bottom)";
  p.colorbar_label = "retrieved";
  trace::Map2D& m = p.map;
  m.rows = m.source_rows = static_cast<int>(depths.size());
  m.cols = m.source_cols = static_cast<int>(lengths.size());
  for (const auto& row : scores) m.values.insert(m.values.end(), row.begin(), row.end());
  if (m.values.size() != depths.size() * lengths.size())
    throw Error("needle grid: " + std::to_string(m.values.size()) + " scores for " + std::to_string(depths.size()) +
                " depths x " + std::to_string(lengths.size()) + " lengths");
  p.scale = {ScaleKind::Linear, 0.0f, 1.0f};
  p.cmap = Colormap::Viridis;
  p.signature = "needle|" + title + "|" + columns + "|" + rows;
  Figure fig;
  fig.title = title;
  fig.parts.push_back(std::move(p));
  return fig;
}

}  // namespace kvscope::viewers
