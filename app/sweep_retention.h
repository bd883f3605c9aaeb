#pragma once
// What a RULER sweep says about evidence (issue 35): per (policy, budget), the 2 x 2 of (evidence mostly kept /
// lost) x (correct / wrong) over its samples, printed under the sweep's summary and written to
// <dir>/retention.json, and per budget a figure of the evidence each policy kept by layer
// (<dir>/retention_by_layer_<budget>.png and .svg).
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/eval/bootstrap.h"
#include "core/eval/sweep_store.h"

namespace kvscope::app {

// {"correct_if", "lost_if", "cells": [{"policy", "budget", <RetentionSummary::json fields>}]} for every cell of
// the grid that has rows, in grid order.
nlohmann::json sweep_retention_json(const eval::SweepGrid& grid, const std::vector<eval::SweepRow>& rows,
                                    const eval::BootstrapSettings& settings);
// The tables of sweep_retention_json, one per cell; nothing when no row has evidence.
void print_sweep_retention(const eval::SweepGrid& grid, const std::vector<eval::SweepRow>& rows,
                           const eval::BootstrapSettings& settings);
// retention.json and (with the window's renderer built in) the by-layer figures; the paths written.
std::vector<std::filesystem::path> write_sweep_retention(const std::filesystem::path& dir, const eval::SweepGrid& grid,
                                                         const std::vector<eval::SweepRow>& rows,
                                                         const eval::BootstrapSettings& settings);

}  // namespace kvscope::app
