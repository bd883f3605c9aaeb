#include "core/policy/swa_mode.h"

#include <algorithm>

#include "core/common/error.h"

namespace kvscope::policy {

SwaMode parse_swa_mode(const std::string& text) {
  if (text == "skip") return SwaMode::Skip;
  if (text == "compress") return SwaMode::Compress;
  if (text == "window") return SwaMode::Window;
  throw UsageError("swa=" + text + " is not a sliding-window mode (expected skip, compress or window)");
}

const char* swa_mode_name(SwaMode mode) {
  switch (mode) {
    case SwaMode::Skip:
      return "skip";
    case SwaMode::Compress:
      return "compress";
    case SwaMode::Window:
      return "window";
  }
  return "skip";
}

int window_mode_global_budget(int budget, int prompt_length, int n_layers, int n_local, int window) {
  const int n_global = n_layers - n_local;
  if (n_global <= 0 || n_local <= 0) return budget;
  const long long local_hold = std::min(window, prompt_length);
  const long long left = static_cast<long long>(budget) * n_layers - local_hold * n_local;
  if (left < n_global)
    throw UsageError("swa=window: the " + std::to_string(n_local) + " sliding-window layers hold " +
                     std::to_string(local_hold) + " entries each, more than a budget of " + std::to_string(budget) +
                     " per layer leaves over " + std::to_string(n_layers) +
                     " layers (use a larger budget, or swa=skip / swa=compress)");
  return static_cast<int>(left / n_global);
}

}  // namespace kvscope::policy
