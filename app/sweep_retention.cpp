#include "app/sweep_retention.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "app/eval_evidence.h"
#include "core/common/atomic_file.h"
#include "core/trace/recorder.h"
#ifdef KVSCOPE_HAVE_GUI
#include "viewers/figure_export.h"
#include "viewers/retention_plot.h"
#endif

namespace kvscope::app {

namespace {

struct CellRetention {
  std::string policy, budget;
  RetentionSummary summary;
};

// Every (policy, budget) of the grid, in its order, whose rows have evidence (the others have nothing to tabulate).
std::vector<CellRetention> cells_with_evidence(const eval::SweepGrid& grid, const std::vector<eval::SweepRow>& rows) {
  std::vector<CellRetention> cells;
  for (const auto& budget : grid.budgets)
    for (const auto& policy : grid.series()) {
      CellRetention cell{policy, budget, {}};
      bool any = false;
      for (const auto& row : rows) {
        if (row.series() != policy || row.budget != budget) continue;
        const double lost = row.metric("evidence_lost");
        cell.summary.add(std::isnan(lost) ? std::nullopt : std::optional<bool>(lost >= 0.5), row.metric("score"));
        any = any || !std::isnan(lost);
      }
      if (any) cells.push_back(std::move(cell));
    }
  return cells;
}

}  // namespace

nlohmann::json sweep_retention_json(const eval::SweepGrid& grid, const std::vector<eval::SweepRow>& rows,
                                    const eval::BootstrapSettings& settings) {
  nlohmann::json cells = nlohmann::json::array();
  nlohmann::json out;
  for (const auto& c : cells_with_evidence(grid, rows)) {
    nlohmann::json cell = c.summary.json(c.policy, settings);
    if (out.empty()) out = {{"correct_if", cell["correct_if"]}, {"lost_if", cell["lost_if"]}};
    cell.erase("correct_if"), cell.erase("lost_if");
    cell["policy"] = c.policy;
    cell["budget"] = c.budget;
    cells.push_back(std::move(cell));
  }
  out["cells"] = std::move(cells);
  return out;
}

void print_sweep_retention(const eval::SweepGrid& grid, const std::vector<eval::SweepRow>& rows,
                           const eval::BootstrapSettings& settings) {
  for (const auto& c : cells_with_evidence(grid, rows)) {
    std::printf("%s at %s: ", c.policy.c_str(), c.budget.c_str());
    c.summary.print(c.policy, settings);
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
    const auto figure = viewers::evidence_retention_by_layer(rows, grid.series(), budget, settings);
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
