#pragma once
// What a policy does on a model's sliding-window ("local") layers (Gemma 2 / 3), set by `swa=` on any policy
// ("snapkv:swa=compress"). The engine holds every local layer to its window whatever the mode (the model
// itself never attends further back); the mode says what the policy adds:
//   skip      the policy leaves local layers alone, as kvpress does: they hold their window, global layers
//             hold the budget (the default);
//   compress  the policy also compresses local layers to its budget, inside their window;
//   window    local layers hold their window and the window is charged to the budget: the global layers
//             share what the budget has left, so that the whole cache is what the budget says.
#include <string>

namespace kvscope::policy {

enum class SwaMode { Skip, Compress, Window };

// "skip", "compress" or "window"; throws UsageError naming the value and the choices.
SwaMode parse_swa_mode(const std::string& text);
const char* swa_mode_name(SwaMode mode);

// The per-(layer, KV head) budget of each global layer in `window` mode: the budget's total over all layers,
// less what the local layers hold (min(window, prompt) each), shared by the global layers. Throws UsageError
// when the local layers alone hold more than the budget allows.
int window_mode_global_budget(int budget, int prompt_length, int n_layers, int n_local, int window);

}  // namespace kvscope::policy
