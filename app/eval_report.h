#pragma once
// How `kvscope eval ruler` and `kvscope eval longbench` report scores: x100, with their bootstrap interval, and
// beside the full cache's on the same samples, the paired difference.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/eval/bootstrap.h"
#include "core/eval/eval_run.h"
#include "core/eval/evidence.h"

namespace kvscope::app {

// {"score", "ci_low", "ci_high", "n"}, the values x100.
nlohmann::json interval_json(const eval::Interval& ci);
// The scores' interval; with the full cache's scores on the same samples (non-empty), also "full" and
// "difference" (scores - full, paired).
nlohmann::json scored_group_json(const std::vector<double>& scores, const std::vector<double>& full,
                                 const eval::BootstrapSettings& settings);
// Evidence spans as every eval record writes them (issue 35): [[first, last, kind], ...], token positions of the
// prompt then the appended tokens, inclusive.
nlohmann::json evidence_json(const std::vector<eval::EvidenceSpan>& spans);
// With --cache-page: a record's entries as stored and in pages (at the end and at their largest); nothing without.
void add_paged_fields(nlohmann::json& record, const eval::CacheMemory& memory);
// {"resamples", "level", "seed"}: what the intervals were drawn with.
nlohmann::json bootstrap_json(const eval::BootstrapSettings& settings);
// One table line of a group: name, score [low, high], n= when show_n, and the full cache and difference when
// the group has them.
void print_scored_group(const std::string& name, const nlohmann::json& group, int name_width, bool show_n);

}  // namespace kvscope::app
