#pragma once
// Layers an allocation leaves behaving unlike the policy they belong to. On SmolLM2-135M the D2O and
// PyramidKV shapes give the first layers the whole prompt and the top layers a few dozen tokens (see
// docs/findings.md); a comparison must show that, so such layers become warnings and run settings:
// a layer whose budget holds the whole prompt compresses nothing, and one below its observation window
// (the scorer keeps the window whatever it scores) or below kSmallLayerBudget tokens keeps little else.
#include <string>
#include <vector>

#include "core/policy/diagnostics.h"
#include "core/policy/policy_layers.h"

namespace kvscope::policy {

constexpr int kSmallLayerBudget = 16;

// budgets: tokens per KV head of each layer after the prompt (seq_len tokens), around the user's
// average_budget; window: the scorer's observation window (0 if none). A layer counts as below the window
// or the floor only when it is also below the average: a small budget the user chose for every layer is
// not the allocation's doing. Sets the settings layer_budgets, layers_whole_prompt, layers_below_window and
// layers_below_floor, and a warning for each non-empty list, naming `source`. With `decided`, the layers the
// policy leaves to their sliding window are in none of the lists, and layer_budgets gives them their window.
void report_layer_budgets(const std::vector<int>& budgets, int seq_len, int average_budget, int window,
                          const std::string& source, Diagnostics& out, const PolicyLayers* decided = nullptr);

}  // namespace kvscope::policy
