// Sampling: greedy is argmax; cuts restrict the support; frequencies follow softmax(logits / T); seeds repeat.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <vector>

#include "core/common/error.h"
#include "core/engine/sampling.h"

using namespace kvscope;

namespace {
const std::vector<float> kLogits = {1.0f, 3.0f, 0.5f, 2.5f, -1.0f, 2.9f};

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p(logits.size());
  double sum = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(logits[i] / temperature);
  for (auto& v : p) v /= sum;
  return p;
}

std::map<int, int> histogram(engine::SamplingOptions options, int draws) {
  engine::Sampler sampler(options);
  std::map<int, int> counts;
  for (int i = 0; i < draws; ++i) ++counts[sampler.sample(kLogits.data(), static_cast<int>(kLogits.size())).id];
  return counts;
}
}  // namespace

TEST_CASE("greedy picks the argmax and reports its log-probability") {
  engine::Sampler sampler({});
  const auto t = sampler.sample(kLogits.data(), 6);
  REQUIRE(t.id == 1);
  REQUIRE(t.logprob == Approx(std::log(softmax(kLogits, 1.0)[1])).epsilon(1e-5));
}

TEST_CASE("temperature sampling follows softmax(logits / T)") {
  const int draws = 60000;
  for (double temperature : {0.7, 1.5}) {
    const auto counts = histogram({static_cast<float>(temperature), 0, 1.0f, 42}, draws);
    const auto p = softmax(kLogits, temperature);
    for (int i = 0; i < 6; ++i) {
      const double expected = p[i] * draws;
      const double sigma = std::sqrt(draws * p[i] * (1 - p[i]));
      const auto it = counts.find(i);
      const double got = it == counts.end() ? 0 : it->second;
      INFO("T " << temperature << " token " << i);
      REQUIRE(std::abs(got - expected) <= 5 * sigma + 1);
    }
  }
}

TEST_CASE("top-k and top-p restrict the support to the most likely tokens") {
  auto top_k = histogram({1.0f, 2, 1.0f, 7}, 5000);
  REQUIRE(top_k.size() == 2);
  REQUIRE(top_k.count(1) == 1);
  REQUIRE(top_k.count(5) == 1);
  // Probabilities at T=1 sorted: token 1, 5, 3 ... ; the nucleus of mass 0.6 is {1, 5}.
  const auto p = softmax(kLogits, 1.0);
  REQUIRE(p[1] < 0.6);
  REQUIRE(p[1] + p[5] >= 0.6);
  auto top_p = histogram({1.0f, 0, 0.6f, 7}, 5000);
  REQUIRE(top_p.size() == 2);
  REQUIRE(top_p.count(1) == 1);
  REQUIRE(top_p.count(5) == 1);
}

TEST_CASE("the same seed gives the same tokens; another seed gives others") {
  auto run = [](uint64_t seed) {
    engine::Sampler sampler({1.0f, 0, 1.0f, seed});
    std::vector<int> ids;
    for (int i = 0; i < 50; ++i) ids.push_back(sampler.sample(kLogits.data(), 6).id);
    return ids;
  };
  REQUIRE(run(3) == run(3));
  REQUIRE(run(3) != run(4));
}

TEST_CASE("invalid sampling options are usage errors") {
  REQUIRE_THROWS_AS(engine::Sampler({-1.0f, 0, 1.0f, 0}), UsageError);
  REQUIRE_THROWS_AS(engine::Sampler({1.0f, -2, 1.0f, 0}), UsageError);
  REQUIRE_THROWS_AS(engine::Sampler({1.0f, 0, 0.0f, 0}), UsageError);
}
