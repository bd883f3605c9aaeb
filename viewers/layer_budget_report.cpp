#include "viewers/layer_budget_report.h"

#include <algorithm>

#include "viewers/step_cache.h"
#include "viewers/view_model.h"

namespace kvscope::viewers {

LayerBudgetReport layer_budget_report(const trace::RunTrace& run) {
  LayerBudgetReport out;
  out.prompt = run.layer_budgets;
  if (run.n_generated() == 0 || run.n_steps() == 0) return out;
  out.decode_held.assign(static_cast<std::size_t>(run.n_layers), 0);
  for (int l = 0; l < run.n_layers; ++l)
    for (int g = 0; g < run.n_kv_heads; ++g) {
      const StepCache end = cache_at_step(run, l, g, -1);
      int held = 0;
      for (std::size_t p = static_cast<std::size_t>(run.prompt_length); p < end.states.size(); ++p)
        held += end.states[p] == static_cast<uint8_t>(EntryState::Kept);
      out.decode_held[l] = std::max(out.decode_held[l], held);
    }
  return out;
}

std::string decode_growth_text(const LayerBudgetReport& report) {
  if (report.decode_held.empty()) return "";
  const auto [lo, hi] = std::minmax_element(report.decode_held.begin(), report.decode_held.end());
  if (*lo == *hi) return "+" + std::to_string(*lo) + " in every layer";
  return "+" + std::to_string(*lo) + " to +" + std::to_string(*hi) + " by layer";
}

}  // namespace kvscope::viewers
