#include "core/policy/budget_spec.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/common/error.h"

namespace kvscope::policy {
namespace {

constexpr const char* kCompressionRatioPrefix = "cr:";

// The shortest text that reads back as the same double (so "cr:0.1" stays "cr:0.1").
std::string shortest(double value) {
  char buffer[32];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, value).ptr;
  return {buffer, end};
}

}  // namespace

BudgetSpec BudgetSpec::parse(const std::string& text) {
  BudgetSpec spec;
  std::string number = text;
  if (number.rfind(kCompressionRatioPrefix, 0) == 0) {
    spec.kind = Kind::CompressionRatio;
    number.erase(0, std::char_traits<char>::length(kCompressionRatioPrefix));
  } else if (!number.empty() && number.back() == '%') {
    spec.kind = Kind::PromptShare;
    number.pop_back();
  }
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  const bool is_number = !number.empty() && *end == '\0' && std::isfinite(value);
  switch (spec.kind) {
    case Kind::CompressionRatio:
      if (!is_number || value < 0.0 || value >= 1.0)
        throw UsageError("compression ratio '" + number + "' (budget '" + text +
                         "') must be a number in [0, 1): the share of the prompt's tokens removed, as kvpress states it");
      break;
    case Kind::PromptShare:
      if (!is_number) break;
      if (value <= 0.0 || value > 100.0) throw UsageError("budget '" + text + "' must be a percentage in (0%, 100%]");
      break;
    case Kind::Tokens:
      if (!is_number) break;
      if (value != std::floor(value)) throw UsageError("budget '" + text + "' must be a whole number of tokens");
      if (value < 1.0) throw UsageError("budget '" + text + "' must be at least 1 token per layer and KV head");
      break;
  }
  if (!is_number)
    throw UsageError("budget '" + text +
                     "' is not a token count (e.g. 128), a percentage of the prompt (e.g. 20%) or a compression ratio "
                     "(e.g. cr:0.25, --compression-ratio 0.25)");
  spec.value = spec.kind == Kind::PromptShare ? value / 100.0 : value;
  return spec;
}

int BudgetSpec::resolve(int prompt_length, int context_length) const {
  int tokens = static_cast<int>(value);
  // A share rounds to the nearest token (halves away from zero); a compression ratio truncates as kvpress's
  // `int(k_len * (1 - compression_ratio))` does, with the same double arithmetic.
  if (kind == Kind::PromptShare) tokens = static_cast<int>(std::lround(value * prompt_length));
  if (kind == Kind::CompressionRatio) tokens = static_cast<int>(prompt_length * (1.0 - value));
  if (tokens < 1)
    throw UsageError("budget " + text() + " of a " + std::to_string(prompt_length) + "-token prompt is 0 tokens; use a larger budget");
  if (tokens > context_length)
    throw UsageError("budget " + text() + " (" + std::to_string(tokens) + " tokens) is larger than the model's context of " +
                     std::to_string(context_length) + " tokens");
  return tokens;
}

std::string BudgetSpec::text() const {
  switch (kind) {
    case Kind::PromptShare: {
      const double percent = value * 100.0;
      return (percent == std::floor(percent) ? std::to_string(static_cast<int>(percent)) : std::to_string(percent)) + "%";
    }
    case Kind::CompressionRatio:
      return kCompressionRatioPrefix + shortest(value);
    case Kind::Tokens:
      break;
  }
  return std::to_string(static_cast<long>(value));
}

}  // namespace kvscope::policy
