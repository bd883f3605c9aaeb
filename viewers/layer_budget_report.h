#pragma once
// Per-layer budgets read the same way for every policy: the prompt budget (what the policy reported as
// Policy::layer_budgets: tokens a KV head of the layer kept of the prompt after prefill) and, apart from it,
// the decode growth (generated tokens the layer's caches still held at the end), which policies that append
// decode tokens (SnapKV, KVMerger, ...) have and policies that evict during decode hold near zero. Mixing the
// two made KVMerger's bars look 75% taller than SnapKV's at the same budget (issue 25).
#include <string>
#include <vector>

#include "core/trace/trace_view.h"

namespace kvscope::viewers {

struct LayerBudgetReport {
  std::vector<int> prompt;       // [layers] the run's layer_budgets (empty when the trace has none)
  std::vector<int> decode_held;  // [layers] the most generated tokens one KV head of the layer held at the end
};

LayerBudgetReport layer_budget_report(const trace::RunTrace& run);

// The decode growth in a few words: "+31 in every layer", "+0 to +12 by layer", or "" when the run generated none.
std::string decode_growth_text(const LayerBudgetReport& report);

}  // namespace kvscope::viewers
