// proportional_budgets and the uniform/pyramid allocations against hand arithmetic.
#include "core/policy/allocation.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <random>

#include "core/common/error.h"
#include "core/policy/allocation_catalog.h"

using namespace kvscope;
using namespace kvscope::policy;

namespace {
long sum_of(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0L); }

PolicyParams pyramid_params(double beta) {
  return PolicyParams("test", allocation_params("pyramid"), {{"beta", std::to_string(beta)}});
}
}  // namespace

TEST_CASE("proportional_budgets rounds by largest remainder", "[allocation]") {
  // weights 1:2:3:4 of 10 -> exactly 1, 2, 3, 4.
  CHECK(proportional_budgets({1, 2, 3, 4}, 10, 0, 100) == std::vector<int>{1, 2, 3, 4});
  // 3 equal weights, 10 tokens: 3.33 each; the one extra token goes to the first (ties to the lower layer).
  CHECK(proportional_budgets({1, 1, 1}, 10, 0, 100) == std::vector<int>{4, 3, 3});
  // 0.5, 0.3, 0.2 of 7: 3.5, 2.1, 1.4 -> floors 3, 2, 1 (6), the remainder goes to 3.5.
  CHECK(proportional_budgets({0.5, 0.3, 0.2}, 7, 0, 100) == std::vector<int>{4, 2, 1});
  // All-zero weights share equally.
  CHECK(proportional_budgets({0, 0}, 5, 0, 100) == std::vector<int>{3, 2});
}

TEST_CASE("proportional_budgets respects the per-entry clamp and moves the excess", "[allocation]") {
  // 8:1:1 of 20 would give 16, 2, 2; max 10 caps the first and the rest share 10 equally.
  CHECK(proportional_budgets({8, 1, 1}, 20, 1, 10) == std::vector<int>{10, 5, 5});
  // min 3 lifts the small ones: 3 + 3 leaves 14 for the first.
  CHECK(proportional_budgets({100, 1, 1}, 20, 3, 100) == std::vector<int>{14, 3, 3});
  // A total beyond n * max is clamped to it.
  CHECK(proportional_budgets({1, 1}, 50, 0, 10) == std::vector<int>{10, 10});
  CHECK_THROWS_AS(proportional_budgets({1, -1}, 5, 0, 10), Error);
  CHECK(proportional_budgets({}, 5, 0, 10).empty());
}

TEST_CASE("proportional_budgets sums exactly on random weights", "[allocation]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 31;
    std::vector<double> w(n);
    for (double& x : w) x = u(rng) * u(rng);
    const int max_each = 5 + trial % 40;
    const long total = static_cast<long>(u(rng) * n * max_each);
    const auto b = proportional_budgets(w, total, 0, max_each);
    REQUIRE(sum_of(b) == total);
    for (int x : b) REQUIRE((x >= 0 && x <= max_each));
  }
}

TEST_CASE("uniform allocation gives every layer the average", "[allocation]") {
  auto a = make_allocation("uniform", PolicyParams());
  CHECK(a->budgets(4, 16, 100) == std::vector<int>{16, 16, 16, 16});
  CHECK(a->budgets(2, 500, 100) == std::vector<int>{100, 100});
}

TEST_CASE("pyramid budgets follow PyramidKV's arithmetic sequence", "[allocation]") {
  auto a = make_allocation("pyramid", pyramid_params(20));
  a->set_reserved(4);
  // avg 20, window 4, 4 layers, prompt 40. Above the window: extra = 16; top = 16 / 20 = 0.8;
  // bottom = 2 * 16 - 0.8 = 31.2 (<= 40 - 4, no cap). Steps of (31.2 - 0.8) / 3 = 10.1333:
  // 31.2, 21.0667, 10.9333, 0.8 (sum 64 = 4 * 16). Floors 31, 21, 10, 0 leave 2 tokens, which go to
  // the largest remainders .9333 (layer 2) and .8 (layer 3): 31, 21, 11, 1; plus the window 4 each.
  CHECK(a->budgets(4, 20, 40) == std::vector<int>{35, 25, 15, 5});
  // Bottom capped at the prompt: avg 30, window 0, 3 layers, prompt 40. top = 1.5, bottom = 58.5 > 40, so
  // bottom = 40 and top = 60 - 40 = 20: 40, 30, 20.
  a->set_reserved(0);
  CHECK(a->budgets(3, 30, 40) == std::vector<int>{40, 30, 20});
  // A budget that covers the prompt is uniform.
  CHECK(a->budgets(3, 50, 40) == std::vector<int>{40, 40, 40});
}

TEST_CASE("pyramid_arithmetic=kvpress follows kvpress's PyramidKVPress.get_layer_budget", "[allocation]") {
  auto a = make_allocation("pyramid", PolicyParams("test", allocation_params("pyramid"),
                                                   {{"beta", "20"}, {"pyramid_arithmetic", "kvpress"}}));
  // Prompt 40, window 4, R = 0.5, 4 layers: kept = 40 x 0.5 = 20 with the window inside; min = 20 / 20 = 1,
  // max = 2 x 20 - 1 = 39 >= 40 - 4, so max = 36 and min = 40 - 36 = 4 (>= the window: a pyramid). Steps of
  // 32 / 3: 36, 25.33, 14.67, 4, each rounded on its own: 36, 25, 15, 4 (sum 80 = 4 x 20 here by chance).
  a->set_reserved(4);
  a->set_compression_ratio(0.5);
  CHECK(a->budgets(4, 20, 40) == std::vector<int>{36, 25, 15, 4});
  // Prompt 10, window 8: R = 0.75 keeps 2.5, min 0.125, max 4.875 >= 2, so max = 2 and min = 5 - 2 = 3 > max: no
  // pyramid, every layer keeps round(2.5) = 2 (Python's round: halves to even), not the truncated 2 by chance:
  // R = 0.25 keeps round(7.5) = 8 where int(10 x 0.75) = 7.
  a->set_reserved(8);
  a->set_compression_ratio(0.75);
  CHECK(a->budgets(3, 2, 10) == std::vector<int>{2, 2, 2});
  a->set_compression_ratio(0.25);
  CHECK(a->budgets(3, 7, 10) == std::vector<int>{8, 8, 8});
  // Without a compression ratio the average budget stands for n (1 - R).
  a->set_reserved(4);
  a->set_compression_ratio(-1.0);
  CHECK(a->budgets(4, 20, 40) == std::vector<int>{36, 25, 15, 4});
}

TEST_CASE("pyramid budgets sum to L x average and fall monotonically", "[allocation]") {
  for (double beta : {1.0, 2.0, 20.0, 100.0})
    for (int layers : {2, 7, 30})
      for (int avg : {5, 17, 64})
        for (int reserved : {0, 4}) {
          auto a = make_allocation("pyramid", pyramid_params(beta));
          a->set_reserved(reserved);
          const int seq_len = 150;
          const auto b = a->budgets(layers, avg, seq_len);
          INFO("beta " << beta << " layers " << layers << " avg " << avg << " reserved " << reserved);
          REQUIRE(static_cast<int>(b.size()) == layers);
          CHECK(sum_of(b) == static_cast<long>(layers) * avg);
          for (int l = 0; l < layers; ++l) {
            CHECK(b[l] >= std::max(1, std::min(reserved, avg)));
            CHECK(b[l] <= seq_len);
            if (l > 0) CHECK(b[l] <= b[l - 1]);
          }
        }
}

TEST_CASE("allocation registry names its entries", "[allocation]") {
  const auto names = allocation_names();
  REQUIRE(names.size() >= 2);
  CHECK(names[0] == "uniform");
  CHECK(names[1] == "pyramid");
  CHECK_THROWS_WITH(make_allocation("triangle", PolicyParams()),
                    Catch::Contains("uniform") && Catch::Contains("pyramid"));
  CHECK(allocation_params("pyramid").at(0).name == "beta");
  CHECK_THROWS_WITH(PolicyParams("x", allocation_params("pyramid"), {{"beta", "0.5"}}),
                    Catch::Contains("out of range"));
}

TEST_CASE("per_layer keeps kvpress's max(1, int(n (1 - r_l))) per layer, whatever the average", "[allocation]") {
  auto make = [](const std::string& ratios) {
    return make_allocation("per_layer",
                           PolicyParams("test", allocation_params("per_layer"), {{"layer_ratios", ratios}}));
  };
  auto a = make("0.25/0.5/0.75/0/0.999");
  CHECK(a->sets_own_budgets());
  // 154 tokens: int(115.5) = 115, int(77) = 77, int(38.5) = 38, all 154, int(0.154) = 0 -> 1; the average 10
  // plays no part.
  CHECK(a->budgets(5, 10, 154) == std::vector<int>{115, 77, 38, 154, 1});
  CHECK(a->layer_compression_ratio(2) == 0.75);
  CHECK(a->layer_compression_ratio(5) == -1.0);
  // kvpress's float arithmetic, truncated: 20 x (1 - 0.8) is 3.999999999999999 in doubles, so kvpress keeps 3
  // (a rounding rule would keep 4)
  CHECK(make("0.8/0.5")->budgets(2, 1, 20) == std::vector<int>{3, 10});
  CHECK_THROWS_WITH(a->budgets(30, 10, 154), Catch::Contains("layer_ratios has 5 values, but the model has 30 layers"));
  CHECK_THROWS_WITH(make_allocation("per_layer", PolicyParams("test", allocation_params("per_layer"), {})),
                    Catch::Contains("allocation 'per_layer' needs layer_ratios"));
}

TEST_CASE("a list parameter: values separated by '/', each checked, printed back as given", "[allocation]") {
  const auto specs = allocation_params("per_layer");
  const PolicyParams p("snapkv", specs, {{"layer_ratios", "0.1/0.25/0"}});
  CHECK(p.get_list("layer_ratios") == std::vector<double>{0.1, 0.25, 0.0});
  CHECK(p.as_text().at("layer_ratios") == "0.1/0.25/0");
  CHECK(PolicyParams("snapkv", specs, {}).get_list("layer_ratios").empty());
  CHECK(specs.at(0).range_text() == "numbers in [0, 1) separated by '/'");
  CHECK(specs.at(0).default_text() == "none");
  CHECK_THROWS_WITH(PolicyParams("snapkv", specs, {{"layer_ratios", "0.1/1"}}),
                    "policy 'snapkv' parameter 'layer_ratios' value 2 of 2, 1, is out of range; expected numbers in "
                    "[0, 1) separated by '/'");
  CHECK_THROWS_WITH(PolicyParams("snapkv", specs, {{"layer_ratios", "0.1//0.2"}}),
                    Catch::Contains("value 2 of 3, '', is not a number"));
  CHECK_THROWS_WITH(PolicyParams("snapkv", specs, {{"layer_ratios", "0.1/x"}}),
                    Catch::Contains("value 2 of 2, 'x', is not a number"));
  CHECK_THROWS_WITH(PolicyParams("snapkv", specs, {{"layer_ratios", "-0.5"}}), Catch::Contains("out of range"));
}
