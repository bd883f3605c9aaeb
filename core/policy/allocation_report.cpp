#include "core/policy/allocation_report.h"

#include <algorithm>

namespace kvscope::policy {

namespace {

std::string json_list(const std::vector<int>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

// "0-3, 7, 9-10": consecutive layers as ranges.
std::string ranges(const std::vector<int>& layers) {
  std::string out;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(layers[i]) + (j > i ? "-" + std::to_string(layers[j]) : "");
    i = j + 1;
  }
  return out;
}

std::string budget_range(const std::vector<int>& budgets, const std::vector<int>& layers) {
  int lo = budgets[layers.front()], hi = lo;
  for (int l : layers) {
    lo = std::min(lo, budgets[l]);
    hi = std::max(hi, budgets[l]);
  }
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
}

}  // namespace

void report_layer_budgets(const std::vector<int>& budgets, int seq_len, int average_budget, int window,
                          const std::string& source, Diagnostics& out, const PolicyLayers* decided) {
  std::vector<int> whole, below_window, below_floor, held = budgets;
  int n_decided = 0;
  for (int l = 0; l < static_cast<int>(budgets.size()); ++l) {
    if (decided && l < decided->model_layers() && decided->slot(l) < 0) {
      held[l] = decided->window_hold(seq_len);
      continue;
    }
    ++n_decided;
    if (budgets[l] >= seq_len) whole.push_back(l);
    if (budgets[l] >= average_budget) continue;
    if (window > 0 && budgets[l] < window) below_window.push_back(l);
    if (budgets[l] < kSmallLayerBudget) below_floor.push_back(l);
  }
  out.set_setting("layer_budgets", json_list(held));
  out.set_setting("layers_whole_prompt", json_list(whole));
  out.set_setting("layers_below_window", json_list(below_window));
  out.set_setting("layers_below_floor", json_list(below_floor));
  // Every layer holding the prompt is the user's budget, not the allocation's doing.
  if (!whole.empty() && static_cast<int>(whole.size()) < n_decided)
    out.warn(source + ": layers " + ranges(whole) + " keep the whole prompt (" + std::to_string(seq_len) +
             " tokens): no compression there");
  if (!below_window.empty())
    out.warn(source + ": layers " + ranges(below_window) + " get " + budget_range(budgets, below_window) +
             " tokens, less than the observation window of " + std::to_string(window) +
             ": only the newest tokens stay");
  if (!below_floor.empty())
    out.warn(source + ": layers " + ranges(below_floor) + " get " + budget_range(budgets, below_floor) +
             " tokens, fewer than " + std::to_string(kSmallLayerBudget));
}

}  // namespace kvscope::policy
