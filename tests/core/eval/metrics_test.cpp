// Fidelity metrics against values worked out by hand on tiny distributions.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/common/error.h"
#include "core/eval/metrics.h"

using namespace kvscope;

namespace {
std::vector<float> logs(std::initializer_list<double> p) {
  std::vector<float> out;
  for (double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}
}  // namespace

TEST_CASE("log_softmax of logits {0, ln 3} is log {1/4, 3/4}") {
  const float logits[] = {0.0f, static_cast<float>(std::log(3.0))};
  const auto out = eval::log_softmax(logits, 2);
  CHECK(out[0] == Approx(std::log(0.25)).margin(1e-6));
  CHECK(out[1] == Approx(std::log(0.75)).margin(1e-6));
  // A large shift changes nothing (the max is subtracted before exp).
  const float shifted[] = {1000.0f, 1000.0f + static_cast<float>(std::log(3.0))};
  CHECK(eval::log_softmax(shifted, 2)[0] == Approx(std::log(0.25)).margin(1e-4));
}

TEST_CASE("KL divergence matches the closed form") {
  const auto p = logs({0.5, 0.5}), q = logs({0.25, 0.75});
  // 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln(4/3)
  CHECK(eval::kl_divergence(p.data(), q.data(), 2) == Approx(0.5 * std::log(4.0 / 3.0)).margin(1e-6));
  CHECK(eval::kl_divergence(p.data(), p.data(), 2) == Approx(0.0).margin(1e-9));
  // p = (1, 0): the zero-probability term adds nothing, KL = ln(1 / 0.5).
  const std::vector<float> one_hot = {0.0f, -INFINITY};
  const auto half = logs({0.5, 0.5});
  CHECK(eval::kl_divergence(one_hot.data(), half.data(), 2) == Approx(std::log(2.0)).margin(1e-6));
}

TEST_CASE("perplexity is exp of the negative mean log-probability") {
  CHECK(eval::perplexity({std::log(0.5), std::log(0.125)}) == Approx(4.0));  // exp((ln 2 + ln 8) / 2)
  CHECK(eval::perplexity({std::log(0.25)}) == Approx(4.0));
  CHECK_THROWS_AS(eval::perplexity({}), Error);
}

TEST_CASE("score_fidelity: agreement, KL mean/max and log-prob gap over steps") {
  // Step 0: argmax differs (0 vs 1); step 1: identical distributions. Tokens: 0 both times.
  const std::vector<std::vector<float>> ref = {logs({0.5, 0.3, 0.2}), logs({0.6, 0.3, 0.1})};
  const std::vector<std::vector<float>> pol = {logs({0.2, 0.5, 0.3}), logs({0.6, 0.3, 0.1})};
  const auto s = eval::score_fidelity(ref, pol, {0, 0});
  const double kl0 = 0.5 * std::log(0.5 / 0.2) + 0.3 * std::log(0.3 / 0.5) + 0.2 * std::log(0.2 / 0.3);  // 0.2238
  CHECK(s.steps == 2);
  CHECK(s.top1_agreement == Approx(0.5));
  CHECK(s.agreeing_prefix == 0);  // the first step already disagrees
  CHECK(eval::score_fidelity({ref[1], ref[0]}, {pol[1], pol[0]}, {0, 0}).agreeing_prefix == 1);
  CHECK(eval::score_fidelity(ref, ref, {0, 0}).agreeing_prefix == 2);
  CHECK(s.kl_max == Approx(kl0).margin(1e-6));
  CHECK(s.kl_mean == Approx(kl0 / 2).margin(1e-6));
  CHECK(s.logprob_gap == Approx(std::log(0.5 / 0.2) / 2).margin(1e-6));
  CHECK_THROWS_AS(eval::score_fidelity(ref, pol, {0}), Error);
  CHECK_THROWS_AS(eval::score_fidelity(ref, {logs({0.5, 0.5}), logs({0.5, 0.5})}, {0, 0}), Error);
}
