#pragma once
// A policy compiled as a shared library against include/kvscope/policy_plugin.h (C ABI, versioned): its
// `score` fills one score per entry of a (layer, KV head), higher kept, and it runs as a ScoredPolicy like
// a Python scorer does.
#include <filesystem>

#include "core/policy/registry.h"

namespace kvscope::policy {

// Opens the library and returns its registry entry; throws UsageError naming the file for a library that
// cannot be opened, lacks the entry point or speaks another ABI version (both versions named).
PolicyInfo load_plugin_policy(const std::filesystem::path& file);

}  // namespace kvscope::policy
