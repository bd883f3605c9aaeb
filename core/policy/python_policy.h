#pragma once
// A policy written in Python (docs/policies.md, "Writing a policy"): a module with `score(obs)` returning a
// (n_kv_heads, n_entries) float array, higher kept, run as a ScoredPolicy so that the protocol switches,
// allocations, warnings, events and traces are exactly the built-ins'. Optional module attributes: `needs`,
// `params`, `protocol`, `recent(budget, params)`, `sinks(budget, params)`, `allocate(info)`, `merge(ctx)`.
#include <filesystem>

#include "core/policy/registry.h"

namespace kvscope::policy {

// Loads the file in the embedded interpreter (running its top-level code) and returns its registry entry;
// throws UsageError naming the file and line for a file that cannot be used.
PolicyInfo load_python_policy(const std::filesystem::path& file);

}  // namespace kvscope::policy
