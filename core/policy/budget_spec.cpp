#include "core/policy/budget_spec.h"

#include <cmath>
#include <cstdlib>

#include "core/common/error.h"

namespace kvscope::policy {

BudgetSpec BudgetSpec::parse(const std::string& text) {
  BudgetSpec spec;
  std::string number = text;
  if (!number.empty() && number.back() == '%') {
    spec.is_ratio = true;
    number.pop_back();
  }
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (number.empty() || *end != '\0' || !std::isfinite(value))
    throw UsageError("budget '" + text + "' is not a token count (e.g. 128) or a percentage of the prompt (e.g. 20%)");
  if (spec.is_ratio) {
    if (value <= 0.0 || value > 100.0) throw UsageError("budget '" + text + "' must be a percentage in (0%, 100%]");
    spec.value = value / 100.0;
  } else {
    if (value != std::floor(value)) throw UsageError("budget '" + text + "' must be a whole number of tokens");
    if (value < 1.0) throw UsageError("budget '" + text + "' must be at least 1 token per layer and KV head");
    spec.value = value;
  }
  return spec;
}

int BudgetSpec::resolve(int prompt_length, int context_length) const {
  const int tokens = is_ratio ? static_cast<int>(std::lround(value * prompt_length)) : static_cast<int>(value);
  if (tokens < 1)
    throw UsageError("budget " + text() + " of a " + std::to_string(prompt_length) + "-token prompt is 0 tokens; use a larger budget");
  if (tokens > context_length)
    throw UsageError("budget " + text() + " (" + std::to_string(tokens) + " tokens) is larger than the model's context of " +
                     std::to_string(context_length) + " tokens");
  return tokens;
}

std::string BudgetSpec::text() const {
  if (is_ratio) {
    const double percent = value * 100.0;
    return (percent == std::floor(percent) ? std::to_string(static_cast<int>(percent)) : std::to_string(percent)) + "%";
  }
  return std::to_string(static_cast<long>(value));
}

}  // namespace kvscope::policy
