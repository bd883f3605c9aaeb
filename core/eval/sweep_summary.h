#pragma once
// How sure each number of a sweep is: per (policy, budget, metric) the mean over the grid's prompts with a
// seeded bootstrap interval, and the paired difference to a baseline policy at the same budget (prompts
// paired; the full cache when the grid has it, or `kvscope sweep --baseline POLICY`), written as
// <dir>/summary.csv and the /eval/summary group of eval.h5 when a sweep ends.
#include <optional>
#include <string>
#include <vector>

#include "core/eval/bootstrap.h"
#include "core/eval/sweep_store.h"

namespace kvscope::eval {

struct CellSummary {
  std::string policy, budget, metric;
  Interval value;
  std::optional<Interval> difference;  // minus the baseline on the same prompts; none without baseline rows
};

// The rows' values of `metric` for (policy, budget), by prompt name; NaN values (not measured: a RULER sample
// without evidence has no evidence_kept) are left out.
std::vector<std::pair<std::string, double>> cell_values(const std::vector<SweepRow>& rows, const std::string& policy,
                                                        const std::string& budget, const std::string& metric);
// Mean and interval over prompts; nullopt when no row of the cell has the metric.
std::optional<Interval> cell_interval(const std::vector<SweepRow>& rows, const std::string& policy,
                                      const std::string& budget, const std::string& metric,
                                      const BootstrapSettings& settings = {});
// The paired difference policy - baseline at one budget over the prompts both have; nullopt when none.
std::optional<Interval> paired_interval(const std::vector<SweepRow>& rows, const std::string& policy,
                                        const std::string& baseline, const std::string& budget,
                                        const std::string& metric, const BootstrapSettings& settings = {});

// Every cell and metric of the grid that has rows, in grid order. The difference uses the prompts both cells
// have, so a sweep still running is summarised on what it has. baseline: a policy of the grid (empty: "full"
// when the grid has it, else no differences); throws UsageError for a policy not in the grid.
std::vector<CellSummary> summarize(const SweepGrid& grid, const std::vector<SweepRow>& rows,
                                   const std::vector<std::string>& metrics, const std::string& baseline = "",
                                   const BootstrapSettings& settings = {});
// The baseline summarize uses for `requested` (see there).
std::string baseline_policy(const SweepGrid& grid, const std::string& requested);

// summary.csv: policy,budget,metric,n,mean,ci_low,ci_high,baseline,diff,diff_ci_low,diff_ci_high,
// diff_excludes_zero (empty difference fields where there is none), written atomically.
void write_summary_csv(const std::filesystem::path& path, const std::vector<CellSummary>& summaries,
                       const std::string& baseline);

}  // namespace kvscope::eval
