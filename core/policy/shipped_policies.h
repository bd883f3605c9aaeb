#pragma once
// The policy files kvscope ships (examples/policies/*.py: ports of kvpress's presses and numpy twins of
// built-ins), found beside the source tree or the installed binary as `make` lays them out
// (core/common/project_paths.h). `kvscope policies` lists them and the window's policy chooser offers them;
// each runs as `--policy python:PATH.py` would. Helper modules they import start with '_' and are not listed.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::policy {

// The first examples/policies folder that exists, or nothing (an installation without the examples).
std::optional<std::filesystem::path> shipped_policies_dir();

// The policy files in `dir`, sorted by name: regular *.py files whose name does not start with '_'.
std::vector<std::filesystem::path> policy_files_in(const std::filesystem::path& dir);

// policy_files_in(shipped_policies_dir()), or none.
std::vector<std::filesystem::path> shipped_policy_files();

// What a file's docstring says it ports: "kvpress KeyDiffPress" for "... (kvpress's KeyDiffPress, ...",
// "built-in h2o" for "... kvscope's built-in `h2o` ...", else empty.
std::string ported_press(const std::string& summary);

}  // namespace kvscope::policy
