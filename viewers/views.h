#pragma once
// The panels by name, for the window and for `kvscope figure`, which renders a panel's figure from a
// trace file without a window: the same builders, so the CLI and the export menu agree.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/eval/evidence.h"
#include "viewers/panel.h"

namespace kvscope::viewers {

// Every view panel except the set-up form, in the window's order.
std::vector<std::unique_ptr<Panel>> make_view_panels();

struct ViewOptions {
  int layer = 0, head = 0, kv_head = 0, step = -1, token = -1;
  bool decode = false;      // attention, compare: decode rows
  bool values = false;      // similarity: value vectors
  bool aggregate = false;   // timeline: share over all caches
  std::string stat;         // layer_stats: statistic name (empty: the first)
  std::string series;       // budget: diagnostic series (empty: prompt budgets)
  ScaleKind scale = ScaleKind::Log;
  Colormap cmap = Colormap::Viridis;
  std::vector<std::string> runs;  // compare: run names, first is the reference (empty: up to 4)
  // attention: only queries [first, end) x keys [first, end), rebuilt exactly from the run's q/k (either alone:
  // the other axis whole), pooled only where the figure has fewer than max_rows x max_cols cells for it.
  std::optional<std::pair<int, int>> queries, keys;
  int max_rows = 1024, max_cols = 1024;
  // evidence: the sample's evidence spans (the run's evidence/ group; unset: the run has none) and the step row
  // that sampled the first answer token.
  std::optional<std::vector<eval::EvidenceSpan>> evidence;
  int first_answer_step = 0;
};

// "A:B" -> {A, B} (positions, B exclusive); throws UsageError naming `option` for anything else.
std::pair<int, int> parse_position_range(const std::string& option, const std::string& text);

// The figure of view `view` for `state` (runs loaded, `state.active` set). Throws UsageError for an
// unknown view or run name and Error when the view has nothing to show, naming what is missing.
Figure view_figure(AppState& state, const std::string& view, const ViewOptions& options);

}  // namespace kvscope::viewers
