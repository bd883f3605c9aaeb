// router_agreement and router_weights: which experts two runs' routers shared per token, and one layer's weights.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/analysis/router_agreement.h"

using namespace kvscope;

namespace {

trace::TokenRouting token(std::vector<int16_t> experts, std::vector<float> weights = {}) {
  trace::TokenRouting t;
  t.experts = std::move(experts);
  t.weights = weights.empty() ? std::vector<float>(t.experts.size(), 0.5f) : std::move(weights);
  return t;
}

// Two layers, k = 2; prompt of 2 tokens, then generated tokens fed back.
trace::RunTrace run_of(std::vector<int> generated, std::vector<trace::TokenRouting> routing) {
  trace::RunTrace run;
  run.n_layers = 2;
  run.router_k = 2;
  run.prompt_ids = {7, 8};
  run.generated_ids = std::move(generated);
  for (auto& t : routing) run.routing.push_back(std::move(t));
  return run;
}

}  // namespace

TEST_CASE("router agreement is the share of the top-k both routers chose, until the fed tokens part",
          "[analysis][router]") {
  // Positions 0, 1: the prompt; 2: generated token 5 in both runs; 3: 6 against 9, where the streams part.
  const trace::RunTrace full =
      run_of({5, 6, 1}, {token({0, 1, 2, 3}), token({0, 1, 2, 3}), token({0, 1, 2, 3}), token({0, 1, 2, 3})});
  const trace::RunTrace policy =
      run_of({5, 9, 1}, {token({1, 0, 2, 3}), token({0, 4, 5, 6}), token({4, 5, 3, 2}), token({0, 1, 2, 3})});
  const analysis::Map2D m = analysis::router_agreement(policy, full);
  REQUIRE(m.rows == 2);
  REQUIRE(m.cols == 4);
  CHECK(m.at(0, 0) == 1.0f);  // the same two experts in another order
  CHECK(m.at(1, 0) == 1.0f);
  CHECK(m.at(0, 1) == 0.5f);  // expert 0 shared, 4 not
  CHECK(m.at(1, 1) == 0.0f);
  CHECK(m.at(0, 2) == 0.0f);
  CHECK(m.at(1, 2) == 1.0f);
  CHECK(std::isnan(m.at(0, 3)));  // fed 9 where the full cache fed 6: no counterpart
  CHECK(std::isnan(m.at(1, 3)));
  CHECK(analysis::fed_token(policy, 3) == 9);
  CHECK(analysis::fed_token(policy, 5) == -1);

  trace::RunTrace dense;
  dense.n_layers = 2;
  CHECK(analysis::router_agreement(dense, full).empty());
  CHECK(analysis::router_agreement(full, dense).empty());
}

TEST_CASE("router weights put each chosen expert's factor in its row", "[analysis][router]") {
  const trace::RunTrace run = run_of({5}, {token({3, 0, 1, 2}, {0.75f, 0.25f, 0.6f, 0.4f}), token({0, 1, 2, 3})});
  const analysis::Map2D layer0 = analysis::router_weights(run, 0);
  REQUIRE(layer0.rows == 4);  // experts 0..3, the highest id chosen in any layer
  REQUIRE(layer0.cols == 2);
  CHECK(layer0.at(3, 0) == 0.75f);
  CHECK(layer0.at(0, 0) == 0.25f);
  CHECK(layer0.at(1, 0) == 0.0f);
  CHECK(layer0.at(0, 1) == 0.5f);
  const analysis::Map2D layer1 = analysis::router_weights(run, 1);
  CHECK(layer1.at(1, 0) == 0.6f);
  CHECK(layer1.at(2, 0) == 0.4f);
  CHECK(layer1.at(3, 1) == 0.5f);
  CHECK(analysis::router_weights(run, 2).empty());
}
