#include "app/sweep_retention.h"

#include <cmath>
#include <cstdio>

#include "app/eval_evidence.h"
#include "core/common/atomic_file.h"
#include "core/trace/recorder.h"
#ifdef KVSCOPE_HAVE_GUI
#include "viewers/figure_export.h"
#include "viewers/retention_plot.h"
#endif

namespace kvscope::app {

namespace {

double metric_of(const eval::SweepRow& row, const std::string& name) {
  for (const auto& [metric, value] : row.metrics)
    if (metric == name) return value;
  return std::nan("");
}

// The cell's samples; false when none of them has evidence (nothing to tabulate).
bool summarise_cell(const std::vector<eval::SweepRow>& rows, const std::string& policy, const std::string& budget,
                    RetentionSummary& summary) {
  bool any = false;
  for (const auto& row : rows) {
    if (row.policy != policy || row.budget != budget) continue;
    const double lost = metric_of(row, "evidence_lost");
    summary.add(std::isnan(lost) ? std::nullopt : std::optional<bool>(lost >= 0.5), metric_of(row, "score"));
    any = any || !std::isnan(lost);
  }
  return any;
}

}  // namespace

nlohmann::json sweep_retention_json(const eval::SweepGrid& grid, const std::vector<eval::SweepRow>& rows,
                                    const eval::BootstrapSettings& settings) {
  nlohmann::json cells = nlohmann::json::array();
  nlohmann::json out;
  for (const auto& budget : grid.budgets)
    for (const auto& policy : grid.policies) {
      RetentionSummary summary;
      if (!summarise_cell(rows, policy, budget, summary)) continue;
      nlohmann::json cell = summary.json(policy, settings);
      if (out.empty()) out = {{"correct_if", cell["correct_if"]}, {"lost_if", cell["lost_if"]}};
      cell.erase("correct_if"), cell.erase("lost_if");
      cell["policy"] = policy;
      cell["budget"] = budget;
      cells.push_back(std::move(cell));
    }
  out["cells"] = std::move(cells);
  return out;
}

void print_sweep_retention(const eval::SweepGrid& grid, const std::vector<eval::SweepRow>& rows,
                           const eval::BootstrapSettings& settings) {
  for (const auto& budget : grid.budgets)
    for (const auto& policy : grid.policies) {
      RetentionSummary summary;
      if (!summarise_cell(rows, policy, budget, summary)) continue;
      std::printf("%s at %s: ", policy.c_str(), budget.c_str());
      summary.print(policy, settings);
    }
}

std::vector<std::filesystem::path> write_sweep_retention(const std::filesystem::path& dir, const eval::SweepGrid& grid,
                                                         const std::vector<eval::SweepRow>& rows,
                                                         const eval::BootstrapSettings& settings) {
  const nlohmann::json table = sweep_retention_json(grid, rows, settings);
  if (table["cells"].empty()) return {};
  std::vector<std::filesystem::path> written{dir / "retention.json"};
  write_file_atomically(written.back(), table.dump(2) + "\n", "sweep retention", Existing::Replace);
#ifdef KVSCOPE_HAVE_GUI
  for (const auto& budget : grid.budgets) {
    const auto figure = viewers::evidence_retention_by_layer(rows, grid.policies, budget, settings);
    if (!figure) continue;
    for (const char* ext : {".png", ".svg"}) {
      written.push_back(dir / (trace::run_name("retention_by_layer", budget) + ext));
      viewers::export_figure(*figure, written.back().string(), {}, Existing::Replace);  // redrawn on resume
    }
  }
#endif
  return written;
}

}  // namespace kvscope::app
