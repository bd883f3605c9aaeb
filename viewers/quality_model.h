#pragma once
// What the Quality panel draws, without ImGui: a sweep's rows as one curve per policy over the budgets
// (the mean of a metric over the prompts of each (policy, budget), as `kvscope sweep` plots it), where the
// live run's budget falls on that axis, and which point a click lands on.
#include <optional>
#include <string>
#include <vector>

#include "core/eval/sweep_file.h"
#include "viewers/figure.h"

namespace kvscope::viewers {

struct QualityCurves {
  std::string source;                 // the file, or "sweep in the window"
  std::string eval_kind;              // fidelity, ppl, needle, or "" when unknown
  std::vector<std::string> metrics;   // columns a curve can show, in the file's order
  std::vector<std::string> policies;  // in order of first appearance
  std::vector<std::string> budgets;   // sorted (budget_less); their x positions: budget_axis(budgets)
  std::vector<eval::SweepRow> rows;

  // Adds a row (a cell of a running sweep); a row of the same cell replaces the earlier one.
  void add(eval::SweepRow row);
  // Mean of `metric` over the rows of (policy, budget); NaN when none has it.
  double mean(const std::string& policy, const std::string& budget, const std::string& metric) const;
  bool empty() const { return rows.empty(); }
};

// The curves of a sweep file's rows. Throws Error when the file has no rows.
QualityCurves quality_curves(const eval::SweepTable& table);

// Budgets in axis order: shares of the prompt ("10%") by size, then token counts ("128") by size; text
// that is neither goes last, alphabetically.
bool budget_less(const std::string& a, const std::string& b);

// The metric a panel shows first: the paper's headline number for the sweep's kind when the file has it
// (top-1 agreement, perplexity, needle exact match), else the first column.
std::string default_metric(const QualityCurves& curves);

// Where `budget` sits on the x axis (budget_axis): its place when listed, else between the listed budgets of the
// same unit that bracket it (linear in value); nullopt outside them or without a budget.
std::optional<double> budget_position(const QualityCurves& curves, const std::string& budget);

struct QualityPoint {
  std::string policy, budget;
  double x = 0, y = 0;  // plot coordinates (the budget's place on the axis, metric mean)
};
// The drawn point nearest to plot coordinates (x, y), if one lies within `radius_px` pixels; the plot's
// scale in units per pixel turns distances into pixels.
std::optional<QualityPoint> point_near(const QualityCurves& curves, const std::string& metric, double x, double y,
                                       double x_units_per_px, double y_units_per_px, double radius_px = 10.0);

// The panel's figure for export: the same curves through the shared figure builder.
// The curves of `metric`; with a baseline policy, each other policy's paired difference to it (the "A - B" view).
// log_y: a log-scale y axis (KL spans decades across budgets); only where log_scale_possible, else ignored.
Figure quality_figure(const QualityCurves& curves, const std::string& metric, const std::string& baseline = "",
                      bool log_y = false);

// Whether every value the curves of `metric` draw (means and interval ends over the prompts) is above zero, as a
// log axis needs. Paired differences (the "A - B" view) can be negative: never on a log axis.
bool log_scale_possible(const QualityCurves& curves, const std::string& metric, const std::string& baseline);

}  // namespace kvscope::viewers
