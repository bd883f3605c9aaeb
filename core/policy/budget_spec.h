#pragma once
// The user's budget: tokens per (layer, KV head) ("128") or a share of the prompt ("20%").
#include <string>

namespace kvscope::policy {

struct BudgetSpec {
  bool is_ratio = false;
  double value = 0.0;  // tokens, or a ratio in (0, 1]

  static BudgetSpec parse(const std::string& text);  // throws UsageError naming the text
  // Tokens per (layer, KV head) for a prompt; throws UsageError when 0 or larger than the context.
  int resolve(int prompt_length, int context_length) const;
  std::string text() const;
};

}  // namespace kvscope::policy
