#include "viewers/run_names.h"

#include <algorithm>
#include <map>

namespace kvscope::viewers {

namespace {

// The number (1, 2, ...) of each entry's prompt among the distinct prompts, in order of first appearance; 0
// for entries without a run.
std::vector<int> prompt_numbers(const std::vector<RunEntry>& runs, int& distinct) {
  std::vector<int> out(runs.size(), 0);
  std::vector<const std::vector<int32_t>*> prompts;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (!runs[i].run) continue;
    const auto& ids = runs[i].run->prompt_ids;
    auto it = std::find_if(prompts.begin(), prompts.end(), [&](const auto* p) { return *p == ids; });
    if (it == prompts.end()) it = prompts.insert(prompts.end(), &ids);
    out[i] = static_cast<int>(it - prompts.begin()) + 1;
  }
  distinct = static_cast<int>(prompts.size());
  return out;
}

std::string origin(const RunEntry& e) {
  if (e.slot == "live") return " (live)";
  if (e.slot == "baseline") return " (baseline)";
  if (e.slot.rfind("pin", 0) == 0) return " (kept " + e.slot.substr(3) + ")";
  const auto slash = e.source.find_last_of('/');
  return " (" + (slash == std::string::npos ? e.source : e.source.substr(slash + 1)) + ")";
}

}  // namespace

std::vector<std::string> shown_run_names(const std::vector<RunEntry>& runs) {
  int distinct = 0;
  const std::vector<int> prompt = prompt_numbers(runs, distinct);
  std::map<std::string, int> uses;
  for (const auto& e : runs)
    if (e.run) ++uses[e.run->name];
  std::vector<std::string> names(runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (runs[i].run) names[i] = runs[i].run->name + (uses[runs[i].run->name] > 1 ? origin(runs[i]) : "");
  // Still the same (two files of one name, ...): number the later ones.
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (names[i].empty()) continue;
    int k = 1;
    for (std::size_t j = 0; j < i; ++j) k += names[j] == names[i] || names[j].rfind(names[i] + " #", 0) == 0;
    if (k > 1) names[i] += " #" + std::to_string(k);
  }
  if (distinct > 1)
    for (std::size_t i = 0; i < runs.size(); ++i)
      if (!names[i].empty()) names[i] += " [p" + std::to_string(prompt[i]) + "]";
  return names;
}

std::string prompt_tag(const std::vector<RunEntry>& runs, int i) {
  int distinct = 0;
  const std::vector<int> prompt = prompt_numbers(runs, distinct);
  if (distinct < 2 || i < 0 || i >= static_cast<int>(runs.size()) || prompt[i] == 0) return "";
  return "p" + std::to_string(prompt[i]);
}

}  // namespace kvscope::viewers
