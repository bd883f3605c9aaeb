#pragma once
// Policies a user brings as a file: `python:PATH.py[,name=value...]` (a Python module, python_policy.h) and
// `plugin:PATH.so[,name=value...]` (a shared library built against include/kvscope/policy_plugin.h,
// plugin_policy.h). Loading one runs its code; the registry (registry.h) reaches them through these.
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/policy/registry.h"

namespace kvscope::policy {

struct PolicyFileSpec {
  enum class Kind { Python, Plugin };
  Kind kind = Kind::Python;
  std::filesystem::path path;  // as given; the path ends at the first ','
  std::vector<std::pair<std::string, std::string>> assignments;
};

// The file spec in `text`, or nothing when `text` names a built-in policy. Throws UsageError for a
// malformed one (no path, an assignment without '=').
std::optional<PolicyFileSpec> parse_policy_file_spec(const std::string& text);

// A policy spec for a file path as a user names it: kept when it already says python: or plugin:, else
// python: for a path ending in .py and plugin: for anything else.
std::string policy_file_spec_for(const std::string& path);

// `text` with a file's path shortened to its stem ("python:/x/key_norm.py,k=3" -> "python:key_norm,k=3"), for
// run names and labels.
std::string display_policy_spec(const std::string& text);

// The registry entry of the file: its name ("python:<stem>"), its declared parameters (the file's own and
// the framework's), its provenance (path, SHA-256 of the exact bytes loaded) and a factory for its
// policy. Loads the file: throws UsageError naming the file (and line) when it cannot be used.
PolicyInfo load_policy_file(const PolicyFileSpec& spec);

}  // namespace kvscope::policy
