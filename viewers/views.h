#pragma once
// The panels by name, for the window and for `kvscope figure`, which renders a panel's figure from a
// trace file without a window: the same builders, so the CLI and the export menu agree.
#include <memory>
#include <string>
#include <vector>

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
  std::string series;       // budget: diagnostic series (empty: final budgets)
  ScaleKind scale = ScaleKind::Log;
  Colormap cmap = Colormap::Viridis;
  std::vector<std::string> runs;  // compare: run names, first is the reference (empty: up to 4)
};

// The figure of view `view` for `state` (runs loaded, `state.active` set). Throws UsageError for an
// unknown view or run name and Error when the view has nothing to show, naming what is missing.
Figure view_figure(AppState& state, const std::string& view, const ViewOptions& options);

}  // namespace kvscope::viewers
