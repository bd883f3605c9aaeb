#include "viewers/stale_runs.h"

#include <filesystem>

#include "core/policy/policy_file.h"
#include "viewers/session.h"

namespace kvscope::viewers {

std::string policy_file_of(const AppState& state, int i) {
  if (i < 0 || i >= static_cast<int>(state.runs.size()) || !state.runs[i].request) return "";
  try {
    const auto file = policy::parse_policy_file_spec(state.runs[i].request->policy_spec);
    return file ? file->path.string() : "";
  } catch (const std::exception&) {
    return "";  // a spec the worker refused never produced a run
  }
}

std::string stale_reason(const AppState& state, int i) {
  const std::string file = policy_file_of(state, i);
  if (file.empty()) return "";
  const auto error = state.policy_file_errors.find(file);
  if (error == state.policy_file_errors.end()) return "";
  return "shows the previous version of " + std::filesystem::path(file).filename().string() +
         "; the file as saved does not load: " + error->second;
}

std::string stale_notice(const AppState& state, bool all_runs) {
  if (state.policy_file_errors.empty()) return "";
  for (int i = 0; i < static_cast<int>(state.runs.size()); ++i) {
    if (!all_runs && i != state.active) continue;
    const std::string why = stale_reason(state, i);
    if (!why.empty()) return "STALE: " + state.run_name(i) + " " + why;
  }
  return "";
}

}  // namespace kvscope::viewers
