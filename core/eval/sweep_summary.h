#pragma once
// How sure each number of a sweep is: per (policy, budget, metric) the mean over the grid's prompts with a
// seeded bootstrap interval, and the paired difference to the full cache at the same budget (prompts paired),
// written as <dir>/summary.csv and the /eval/summary group of eval.h5 when a sweep ends.
#include <optional>
#include <string>
#include <vector>

#include "core/eval/bootstrap.h"
#include "core/eval/sweep_store.h"

namespace kvscope::eval {

struct CellSummary {
  std::string policy, budget, metric;
  Interval value;
  std::optional<Interval> difference;  // minus the full cache on the same prompts; none without a full row
};

// The rows' values of `metric` for (policy, budget), by prompt name.
std::vector<std::pair<std::string, double>> cell_values(const std::vector<SweepRow>& rows, const std::string& policy,
                                                        const std::string& budget, const std::string& metric);
// Mean and interval over prompts; nullopt when no row of the cell has the metric.
std::optional<Interval> cell_interval(const std::vector<SweepRow>& rows, const std::string& policy,
                                      const std::string& budget, const std::string& metric,
                                      const BootstrapSettings& settings = {});
// Every cell and metric of the grid that has rows, in grid order. The difference uses the prompts both cells
// have, so a sweep still running is summarised on what it has.
std::vector<CellSummary> summarize(const SweepGrid& grid, const std::vector<SweepRow>& rows,
                                   const std::vector<std::string>& metrics, const BootstrapSettings& settings = {});

// summary.csv: policy,budget,metric,n,mean,ci_low,ci_high,diff_vs_full,diff_ci_low,diff_ci_high,diff_excludes_zero
// (empty difference fields without a full row), written atomically.
void write_summary_csv(const std::filesystem::path& path, const std::vector<CellSummary>& summaries,
                       const BootstrapSettings& settings);

}  // namespace kvscope::eval
