// The Router view (`kvscope figure --view router`, the window's Router panel): one layer's router weights, and the
// experts shared with a full-cache run of the same prompt, drawn from the values the trace holds.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "core/common/error.h"
#include "viewers/router_map.h"
#include "viewers/views.h"

using namespace kvscope;
using namespace kvscope::viewers;

namespace {

// Two layers, k = 1 of 3 experts, a 3-token prompt and 2 generated tokens (rows: 3 + 2 - 1 fed tokens).
RunEntry moe_run(const std::string& name, const std::string& policy, std::vector<int16_t> layer1_experts) {
  auto run = std::make_shared<trace::RunTrace>();
  run->name = name;
  run->n_layers = 2;
  run->n_heads = run->n_kv_heads = 1;
  run->prompt_ids = {4, 5, 6};
  run->prompt_length = 3;
  run->generated_ids = {8, 9};
  run->complete = true;
  run->metadata["policy"] = policy;
  run->router_k = 1;
  for (int p = 0; p < 4; ++p) {
    trace::TokenRouting t;
    t.experts = {static_cast<int16_t>(p % 3), layer1_experts[p]};
    t.weights = {1.0f, 1.0f};
    run->routing.push_back(t);
  }
  RunEntry e;
  e.run = run;
  e.slot = name;
  e.source = "test";
  return e;
}

}  // namespace

TEST_CASE("the router view draws one layer's weights and the experts shared with the full cache", "[router]") {
  AppState state;
  state.runs = {moe_run("full", "full", {0, 1, 2, 0}), moe_run("h2o_b50pct", "h2o", {0, 2, 2, 1})};
  state.active = 1;
  ViewOptions o;
  o.layer = 1;
  const Figure f = view_figure(state, "router", o);
  REQUIRE(f.parts.size() == 2);
  const auto& weights = std::get<HeatmapPlot>(f.parts[0]);
  REQUIRE(weights.map.rows == 3);  // experts 0..2
  REQUIRE(weights.map.cols == 4);
  CHECK(weights.map.at(2, 1) == 1.0f);  // layer 1, position 1: expert 2
  CHECK(weights.map.at(1, 1) == 0.0f);
  const auto& shared = std::get<HeatmapPlot>(f.parts[1]);
  REQUIRE(shared.map.rows == 2);
  CHECK(shared.map.at(0, 1) == 1.0f);  // layer 0 chose alike everywhere
  CHECK(shared.map.at(1, 0) == 1.0f);
  CHECK(shared.map.at(1, 1) == 0.0f);  // expert 2 against the full cache's 1
  CHECK(shared.map.at(1, 3) == 0.0f);  // fed token 8 in both
  CHECK(shared.title.find("full") != std::string::npos);

  // Without a full-cache run of the prompt: the weights alone.
  state.runs.erase(state.runs.begin());
  state.active = 0;
  CHECK(view_figure(state, "router", o).parts.size() == 1);

  // A dense run says why there is nothing to draw.
  auto dense = std::make_shared<trace::RunTrace>();
  dense->name = "dense";
  dense->n_layers = 2;
  dense->n_heads = dense->n_kv_heads = 1;
  state.runs[0].run = dense;
  CHECK_THROWS_WITH(view_figure(state, "router", o), Catch::Contains("has no router choices"));
}
