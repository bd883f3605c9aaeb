// router_load_entropy: the entropy of each layer's expert usage over a run's recorded router choices.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/analysis/router_load.h"

using namespace kvscope;

namespace {

trace::TokenRouting token(std::vector<int16_t> experts) {
  trace::TokenRouting t;
  t.experts = std::move(experts);
  t.weights.assign(t.experts.size(), 0.5f);
  return t;
}

}  // namespace

TEST_CASE("router load entropy counts every top-k choice per layer", "[analysis][router]") {
  trace::RunTrace run;
  run.n_layers = 2;
  run.router_k = 2;
  CHECK(analysis::router_load_entropy(run).empty());  // a dense run
  // Layer 0 always picks experts 0 and 1 (two equally used: 1 bit); layer 1 uses 0, 1, 2, 3 once each over the two
  // tokens, then 0 and 1 again: shares 2/6, 2/6, 1/6, 1/6.
  run.routing.push_back(token({0, 1, 0, 1}));
  run.routing.push_back(token({1, 0, 2, 3}));
  run.routing.push_back(token({0, 1, 1, 0}));
  const std::vector<double> entropy = analysis::router_load_entropy(run);
  REQUIRE(entropy.size() == 2);
  CHECK(entropy[0] == Approx(1.0));
  const double third = 1.0 / 3.0, sixth = 1.0 / 6.0;
  CHECK(entropy[1] == Approx(-2 * third * std::log2(third) - 2 * sixth * std::log2(sixth)));
}
