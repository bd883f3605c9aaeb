#include "core/eval/sweep_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "core/eval/csv.h"

namespace kvscope::eval {

std::vector<std::pair<std::string, double>> cell_values(const std::vector<SweepRow>& rows, const std::string& policy,
                                                        const std::string& budget, const std::string& metric) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& r : rows)
    if (const double value = r.metric(metric); r.series() == policy && r.budget == budget && !std::isnan(value))
      out.emplace_back(r.prompt, value);  // NaN: not measured (or no such metric)
  return out;
}

std::optional<Interval> cell_interval(const std::vector<SweepRow>& rows, const std::string& policy,
                                      const std::string& budget, const std::string& metric,
                                      const BootstrapSettings& settings) {
  std::vector<double> values;
  for (const auto& [prompt, value] : cell_values(rows, policy, budget, metric)) values.push_back(value);
  if (values.empty()) return std::nullopt;
  return bootstrap_mean(values, settings);
}

std::optional<Interval> paired_interval(const std::vector<SweepRow>& rows, const std::string& policy,
                                        const std::string& baseline, const std::string& budget,
                                        const std::string& metric, const BootstrapSettings& settings) {
  std::map<std::string, double> base;
  for (const auto& [prompt, value] : cell_values(rows, baseline, budget, metric)) base[prompt] = value;
  std::vector<double> a, b;
  for (const auto& [prompt, value] : cell_values(rows, policy, budget, metric))
    if (auto it = base.find(prompt); it != base.end()) a.push_back(value), b.push_back(it->second);
  if (a.empty()) return std::nullopt;
  return bootstrap_paired_difference(a, b, settings);
}

std::string baseline_policy(const SweepGrid& grid, const std::string& requested) {
  // With cache types a baseline is a series ("full @f16"); the default is the full cache in the first type.
  const std::vector<std::string> series = grid.series();
  const std::string fallback =
      grid.cache_types.empty() ? std::string("full") : SweepRow::series_label("full", grid.cache_types.front());
  const bool in_grid = std::find(series.begin(), series.end(), requested.empty() ? fallback : requested) != series.end();
  if (!requested.empty() && !in_grid)
    throw UsageError("--baseline '" + requested + "' is not one of the sweep's policies" +
                     (grid.cache_types.empty() ? "" : " (with --cache-types: 'policy @type')"));
  return in_grid ? (requested.empty() ? fallback : requested) : "";
}

std::vector<CellSummary> summarize(const SweepGrid& grid, const std::vector<SweepRow>& rows,
                                   const std::vector<std::string>& metrics, const std::string& baseline,
                                   const BootstrapSettings& settings) {
  const std::string base = baseline_policy(grid, baseline);
  std::vector<CellSummary> out;
  for (const auto& policy : grid.series())
    for (const auto& budget : grid.budgets)
      for (const auto& metric : metrics) {
        const auto values = cell_values(rows, policy, budget, metric);
        if (values.empty()) continue;
        CellSummary s{policy, budget, metric, {}, std::nullopt};
        std::vector<double> v;
        for (const auto& [prompt, value] : values) v.push_back(value);
        s.value = bootstrap_mean(v, settings);
        if (!base.empty() && policy != base) s.difference = paired_interval(rows, policy, base, budget, metric, settings);
        out.push_back(std::move(s));
      }
  return out;
}

void write_summary_csv(const std::filesystem::path& path, const std::vector<CellSummary>& summaries,
                       const std::string& baseline) {
  std::string text = "policy,budget,metric,n,mean,ci_low,ci_high,baseline,diff,diff_ci_low,diff_ci_high,diff_excludes_zero\n";
  for (const auto& s : summaries) {
    text += csv_field(s.policy) + "," + csv_field(s.budget) + "," + csv_field(s.metric) + "," + std::to_string(s.value.n) + "," +
            csv_number(s.value.mean) + "," + csv_number(s.value.low) + "," + csv_number(s.value.high) + ",";
    text += (s.difference ? csv_field(baseline) : std::string()) + ",";
    if (s.difference)
      text += csv_number(s.difference->mean) + "," + csv_number(s.difference->low) + "," + csv_number(s.difference->high) + "," +
              (s.difference->excludes_zero() ? "1" : "0");
    else
      text += ",,,";
    text += "\n";
  }
  write_file_atomically(path, text);
}

}  // namespace kvscope::eval
