#include "core/policy/user_scorer.h"

#include <algorithm>
#include <cmath>

#include "core/common/error.h"
#include "core/policy/allocation_catalog.h"

namespace kvscope::policy {

const std::vector<std::string>& scorer_need_names() {
  static const std::vector<std::string> names = {"column_sums", "window_sums",      "window_rows",
                                                 "last_row",    "log_sum_exp",      "queries",
                                                 "queries_pre_rope", "keys_pre_rope", "hidden_states",
                                                 "q_proj",      "k_proj"};
  return names;
}

ObservationRequest request_for_needs(const std::vector<std::string>& needs, const std::filesystem::path& file) {
  ObservationRequest r;
  for (const auto& n : needs) {
    if (n == "column_sums") r.column_sums = true;
    else if (n == "window_sums") r.window_sums = true;
    else if (n == "window_rows") r.window_rows = true;
    else if (n == "last_row" || n == "last_rows") r.last_row = true;
    else if (n == "log_sum_exp") r.log_sum_exp = true;
    else if (n == "queries") r.queries = true;
    else if (n == "queries_pre_rope") r.queries_pre_rope = true;
    else if (n == "keys_pre_rope") r.keys_pre_rope = true;
    else if (n == "hidden_states") r.hidden_states = true;
    else if (n == "q_proj" || n == "k_proj") continue;  // weights, not attention: the Python view reads them
    else {
      std::string valid;
      for (const auto& v : scorer_need_names()) valid += (valid.empty() ? "" : ", ") + v;
      throw UsageError("policy file '" + file.string() + "' needs '" + n + "', which kvscope does not provide; valid: " + valid);
    }
  }
  return r;
}

bool is_framework_param(const std::string& name) { return name == "window" || name == "recent" || name == "sinks"; }

std::vector<ParamSpec> scorer_framework_params(const std::map<std::string, int>& defaults) {
  auto def = [&](const char* name) {
    const auto it = defaults.find(name);
    return it == defaults.end() ? 0 : it->second;
  };
  return {ParamSpec::integer("window", def("window"), 0, 4096,
                             "observation window: the last w queries of a step that window_sums and window_rows "
                             "cover; the last w entries are always kept (SnapKV's convention)"),
          ParamSpec::integer("recent", def("recent"), 0, 1 << 20, "the most recent entries, always kept"),
          ParamSpec::integer("sinks", def("sinks"), 0, 1 << 20, "the first entries (attention sinks), always kept")};
}

void resolve_allocation_params(const std::string& what, const std::vector<std::string>& declared,
                               const std::map<std::string, int>& framework_defaults, PolicyParams& params) {
  if (!params.has("allocation")) return;
  const std::string& chosen = params.get_choice("allocation");
  for (const auto& spec : find_allocation(chosen).params) {
    const std::string owners = what + " and allocation '" + chosen + "' (allocation=" + chosen + ")";
    if (std::find(declared.begin(), declared.end(), spec.name) != declared.end())
      throw UsageError(what + " declares parameter '" + spec.name + "', and so does allocation '" + chosen +
                       "' (allocation=" + chosen + "): one spec cannot set both. Rename the file's parameter, or "
                       "choose another allocation");
    if (!is_framework_param(spec.name) || params.given(spec.name)) continue;
    const auto file_default = framework_defaults.find(spec.name);
    if (file_default == framework_defaults.end()) {
      params.set_number(spec.name, spec.default_number);
    } else if (file_default->second != spec.default_number) {
      throw UsageError("parameter '" + spec.name + "' is shared by " + owners + ", whose defaults differ (the file's " +
                       std::to_string(file_default->second) + ", the allocation's " + spec.default_text() +
                       "): give " + spec.name + "=N in the spec");
    }
  }
}

void check_window(const ObservationRequest& needs, const PolicyParams& params, const std::filesystem::path& file) {
  if ((needs.window_sums || needs.window_rows) && params.get_int("window") == 0)
    throw UsageError("policy file '" + file.string() + "' needs window_sums or window_rows, which cover the last " +
                     "`window` queries, but window is 0: give window=N (or a default in the file's params)");
}

std::string non_finite_scores(const float* scores, std::size_t n) {
  std::size_t count = 0, first = 0;
  for (std::size_t j = 0; j < n; ++j)
    if (!std::isfinite(scores[j]) && count++ == 0) first = j;
  if (count == 0) return "";
  return std::to_string(count) + " score" + (count == 1 ? " is" : "s are") + " not finite, the first at entry " +
         std::to_string(first) + ": " + (std::isnan(scores[first]) ? "nan" : scores[first] > 0 ? "inf" : "-inf");
}

UserScorer::UserScorer(std::string name, const PolicyParams& params, ObservationRequest needs, std::filesystem::path file)
    : ScoredPolicy(std::move(name), params),
      needs_(needs),
      file_(std::move(file)),
      window_(params.get_int("window")),
      recent_(params.get_int("recent")),
      sinks_(params.get_int("sinks")) {
  needs_.window = (needs_.window_sums || needs_.window_rows) ? window_ : 0;
  check_window(needs_, params, file_);
}

}  // namespace kvscope::policy
