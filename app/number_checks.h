#pragma once
// Checks of numeric options. CLI11's PositiveNumber and NonNegativeNumber refuse with "Value 0 not in range
// 0.000000 to 1797693134862315708...": the largest double written out in 309 digits. These say what is expected.
#include <CLI/CLI.hpp>
#include <string>

namespace kvscope::app {

inline CLI::Validator number_check(bool zero_allowed) {
  return CLI::Validator(
      [zero_allowed](std::string& text) -> std::string {
        double value = 0.0;
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number";
        if (value > 0.0 || (zero_allowed && value == 0.0)) return "";
        return text + (zero_allowed ? " is negative (expected 0 or more)" : " is not positive (expected more than 0)");
      },
      zero_allowed ? "NONNEGATIVE" : "POSITIVE");
}

// More than 0 (a count: at least 1).
inline const CLI::Validator kPositive = number_check(false);
// 0 or more.
inline const CLI::Validator kNonNegative = number_check(true);

}  // namespace kvscope::app
