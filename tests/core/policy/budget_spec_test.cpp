// Budgets: token counts, shares of the prompt (nearest token) and kvpress's compression ratios (truncated).
#include <catch2/catch.hpp>

#include <tuple>

#include "core/common/error.h"
#include "core/policy/budget_spec.h"

using kvscope::UsageError;
using kvscope::policy::BudgetSpec;

TEST_CASE("a compression ratio keeps int(n * (1 - R)) tokens, as kvpress's Python computes it") {
  // Expected counts printed by Python 3.11: int(n * (1 - r)) for each (n, r), kvpress's
  // `int(k_len * (1 - self.compression_ratio))`. Where the exact product is a whole number that float rounding
  // puts just below (20 * (1 - 0.8) = 3.9999999999999996), kvpress keeps one token fewer, and so must kvscope.
  const std::vector<std::tuple<int, double, int>> cases = {
      {154, 0.25, 115}, {10, 0.7, 3}, {10, 0.3, 7},   {100, 0.29, 71}, {100, 0.57, 43}, {947, 0.1, 852},
      {741, 0.5, 370},  {20, 0.8, 3}, {20, 0.9, 1},   {25, 0.56, 10},  {25, 0.68, 7},   {49, 0.02, 48},
      {57, 0.43, 32},   {1, 0.0, 1},  {1000, 0.001, 999}};
  for (const auto& [n, r, kept] : cases) {
    INFO("n = " << n << ", r = " << r);
    const auto spec = BudgetSpec::parse(BudgetSpec::compression_ratio_text(std::to_string(r)));
    CHECK(spec.kind == BudgetSpec::Kind::CompressionRatio);
    CHECK(spec.resolve(n, 8192) == kept);
  }
}

TEST_CASE("a share rounds to the nearest token; a compression ratio of the same share can keep fewer") {
  CHECK(BudgetSpec::parse("75%").resolve(154, 8192) == 116);  // 115.5 rounds up
  CHECK(BudgetSpec::parse("cr:0.25").resolve(154, 8192) == 115);
  CHECK(BudgetSpec::parse("20%").resolve(154, 8192) == 31);  // 30.8
  CHECK(BudgetSpec::parse("128").resolve(154, 8192) == 128);
}

TEST_CASE("budget texts read back as themselves") {
  for (const char* text : {"cr:0.25", "cr:0.1", "cr:0", "25%", "128"}) CHECK(BudgetSpec::parse(text).text() == text);
  CHECK(BudgetSpec::parse("cr:0.75").kept_share() == Approx(0.25));
  CHECK(BudgetSpec::parse("40%").kept_share() == Approx(0.4));
  CHECK_FALSE(BudgetSpec::parse("64").relative());
}

TEST_CASE("bad compression ratios are refused, naming the ratio") {
  for (const char* text : {"cr:1", "cr:1.5", "cr:-0.1", "cr:", "cr:abc", "cr:nan"}) {
    INFO(text);
    CHECK_THROWS_WITH(BudgetSpec::parse(text), Catch::Contains("compression ratio") && Catch::Contains("[0, 1)"));
  }
  // Keeping nothing is refused when the prompt is resolved, as for any budget.
  CHECK_THROWS_AS(BudgetSpec::parse("cr:0.9").resolve(3, 8192), UsageError);
}
