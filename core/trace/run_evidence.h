#pragma once
// A run's evidence spans as an evaluation stores them in its per-sample traces (docs/trace-format.md,
// `evidence/`): /runs/<run>/evidence/positions int32 [n][2] (first, last token position, inclusive) and
// /runs/<run>/evidence/kinds fixed-length UTF-8 [n] ("needle value", "chain", ...). Open the file through
// probe_trace first, as every user-facing trace open does.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/eval/evidence.h"

namespace kvscope::trace {

// nullopt: the run has no `evidence` group (a trace made by `kvscope trace`, or a sample whose evidence is not
// known). Throws Error naming the file and the dataset when the group is there but malformed (shapes that
// disagree, a span with first > last or a negative position), and UsageError when the run does not exist.
std::optional<std::vector<eval::EvidenceSpan>> read_run_evidence(const std::filesystem::path& trace,
                                                                 const std::string& run);

}  // namespace kvscope::trace
