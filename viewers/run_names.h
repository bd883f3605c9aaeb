#pragma once
// Names that tell the runs on screen apart. A run's own name says its policy and budget ("snapkv_b25pct"), so a
// run kept for comparison and the live run of the same settings, or runs of the same settings on different
// prompts, shared one name and mixed unlabeled in tables and legends (issue 25). Here each shown run gets:
//   - its own name when no other shown run has it; else the name with where it comes from: " (live)",
//     " (kept N)" for the N-th *Keep for comparison*, " (baseline)", " (FILE)", and " #k" if that still repeats;
//   - when the shown runs are of more than one prompt, a prompt tag " [p1]", " [p2]" (prompts numbered in the
//     order they first appear in the list) on every run.
#include <string>
#include <vector>

#include "viewers/panel.h"

namespace kvscope::viewers {

// One name per entry, in order ("" for an entry without a run).
std::vector<std::string> shown_run_names(const std::vector<RunEntry>& runs);

// "p2": the tag of entry i's prompt among the entries' distinct prompts, or "" when they all share one prompt.
std::string prompt_tag(const std::vector<RunEntry>& runs, int i);

}  // namespace kvscope::viewers
