#pragma once
// The user's budget: tokens per (layer, KV head) ("128"), a share of the prompt ("20%", rounded to the nearest
// token), or a compression ratio as kvpress states it ("cr:0.25", `--compression-ratio 0.25`: keeps
// int(n * (1 - 0.25)) of an n-token prompt, truncated, exactly kvpress's rule).
#include <string>

namespace kvscope::policy {

struct BudgetSpec {
  enum class Kind { Tokens, PromptShare, CompressionRatio };
  Kind kind = Kind::Tokens;
  double value = 0.0;  // tokens; a share in (0, 1]; a compression ratio in [0, 1)

  static BudgetSpec parse(const std::string& text);  // throws UsageError naming the text
  // The budget text of `--compression-ratio R` ("cr:R"); R is checked when the text is parsed.
  static std::string compression_ratio_text(const std::string& ratio) { return "cr:" + ratio; }
  // Tokens per (layer, KV head) for a prompt; throws UsageError when 0 or larger than the context.
  int resolve(int prompt_length, int context_length) const;
  std::string text() const;
  bool relative() const { return kind != Kind::Tokens; }  // scales with the prompt
  double kept_share() const { return kind == Kind::CompressionRatio ? 1.0 - value : value; }  // relative budgets
};

}  // namespace kvscope::policy
