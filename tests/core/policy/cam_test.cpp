// CaM on a hand-made cache: which entries the base keeps, and the value merge rule written out as a plain
// loop (each evicted value, in cache order, adds 1/m of itself to the next m entries when its mask is on),
// with masks forced by the attention (p = 0 or p >= 1) so the expected values need no random draws; then
// the Bernoulli rate over many evictions.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "core/policy/registry.h"
#include "tests/core/policy/policy_harness.h"

using namespace kvscope;
using namespace kvscope::test;
using policy::make_policy;

namespace {

struct Run {
  cache::KVCache cache{1, 1, 2};
  std::vector<std::vector<float>> keys, values;  // as appended
  std::unique_ptr<policy::Policy> policy;
};

// One layer, one KV head, one query head: n entries with keys (j, 1), values (sin j, cos j) * (j + 1), and
// the prompt's column sums `attention`; the prompt is compressed once to `budget`.
Run compress(const std::string& spec, const std::vector<float>& attention, int budget) {
  Run run;
  const int n = static_cast<int>(attention.size());
  for (int j = 0; j < n; ++j) {
    run.keys.push_back({static_cast<float>(j), 1.0f});
    run.values.push_back({std::sin(static_cast<float>(j)) * (j + 1), std::cos(static_cast<float>(j)) * (j + 1)});
    const int32_t pos = j;
    run.cache.append(0, run.keys.back().data(), run.values.back().data(), 1, &pos);
  }
  run.policy = make_policy(spec).policy;
  policy::RunInfo info;
  info.config.n_layers = 1;
  info.config.n_heads = 1;
  info.config.n_kv_heads = 1;
  info.config.head_dim = 2;
  info.prompt_length = n;
  info.budget = budget;
  run.policy->begin(info);
  observation::AttentionObservation obs;
  obs.layer = 0;
  obs.phase = observation::Phase::Prefill;
  obs.prefill_done = true;
  obs.n_heads = 1;
  obs.n_kv_heads = 1;
  for (int j = 0; j < n; ++j) obs.query_positions.push_back(j);
  obs.n_keys = {n};
  obs.column_sums = {attention};
  run.cache.apply(run.policy->after_layer(obs, run.cache));
  run.cache.apply(run.policy->after_step({observation::Phase::Prefill, 0, n, true}, run.cache));
  return run;
}

}  // namespace

TEST_CASE("cam adds evicted values into the next m entries, keys untouched, under its mask", "[policy][cam]") {
  // Kept by the local base (2 sinks + a window of 4): 0, 1, 8..11; the largest kept attention is 1.
  // Evicted 2..7: a_e = 0 never merges (p = 0), a_e >= 1 always does (p >= 1).
  const std::vector<float> attention = {1, 1, 0, 2, 0, 1.5f, 0, 0, 1, 0.5f, 0.25f, 1};
  const int budget = 6, m = 2;
  Run run = compress("cam:sinks=2,merge_tokens=2", attention, budget);
  const std::vector<int> kept = {0, 1, 8, 9, 10, 11};
  REQUIRE(std::vector<int>(run.cache.positions(0, 0).begin(), run.cache.positions(0, 0).end()) == kept);

  // The rule by hand: in cache order, an evicted entry whose mask is on adds V[e] / m to the next m entries
  // (evicted ones among them carry it on).
  std::vector<std::vector<double>> v;
  for (const auto& x : run.values) v.push_back({x[0], x[1]});
  for (int e = 2; e <= 7; ++e) {
    if (attention[e] < 1.0f) continue;  // p = 0
    for (int t = e + 1; t <= e + m; ++t)
      for (int c = 0; c < 2; ++c) v[t][c] += v[e][c] / m;
  }
  for (std::size_t i = 0; i < kept.size(); ++i) {
    INFO("entry at position " << kept[i]);
    CHECK(run.cache.value(0, 0, static_cast<int>(i))[0] == Approx(v[kept[i]][0]).epsilon(1e-6));
    CHECK(run.cache.value(0, 0, static_cast<int>(i))[1] == Approx(v[kept[i]][1]).epsilon(1e-6));
    CHECK(run.cache.key(0, 0, static_cast<int>(i))[0] == run.keys[kept[i]][0]);  // keys are never merged
    CHECK(run.cache.key(0, 0, static_cast<int>(i))[1] == run.keys[kept[i]][1]);
  }
  // No merge reaches a kept entry: 3 merges into 4 and 5, 5 into 6 and 7, and those four are masked.
  CHECK(v[8][0] == Approx(run.values[8][0]));
  const auto& settings = run.policy->diagnostics().settings();
  CHECK(settings.at("value_merges") == "2");
  CHECK(settings.at("masked_evictions") == "4");

  // merge_mask=always merges every evicted value, and then kept entry 8 and 9 change.
  Run always = compress("cam:sinks=2,merge_tokens=2,merge_mask=always", attention, budget);
  std::vector<std::vector<double>> w;
  for (const auto& x : always.values) w.push_back({x[0], x[1]});
  for (int e = 2; e <= 7; ++e)
    for (int t = e + 1; t <= e + m; ++t)
      for (int c = 0; c < 2; ++c) w[t][c] += w[e][c] / m;
  for (std::size_t i = 0; i < kept.size(); ++i)
    for (int c = 0; c < 2; ++c)
      CHECK(always.cache.value(0, 0, static_cast<int>(i))[c] == Approx(w[kept[i]][c]).epsilon(1e-6));
  CHECK(always.cache.value(0, 0, 2)[0] != Approx(always.values[8][0]));
}

TEST_CASE("cam:base=h2o keeps what h2o keeps", "[policy][cam]") {
  const Shape shape{2, 6, 2, 4};
  AttentionTable table(shape, 64, 41);
  auto cam = make_policy("cam:base=h2o"), h2o = make_policy("h2o");
  PolicyDriver a(table, *cam.policy, 30, 10, 5), b(table, *h2o.policy, 30, 10, 5);
  a.run(5);
  b.run(5);
  for (int l = 0; l < shape.layers; ++l)
    for (int g = 0; g < shape.kv_heads; ++g) CHECK(a.kept(l, g) == b.kept(l, g));
}

TEST_CASE("cam's Bernoulli mask merges with probability a_e / max kept a", "[policy][cam]") {
  // 2000 evicted entries with 0.3 of the kept entries' attention: about 600 merge. Binomial(2000, 0.3) has a
  // standard deviation of 20.5, so [510, 690] is 4.4 of them either side.
  const int n = 2010;
  std::vector<float> attention(n, 0.3f);
  for (int j = n - 8; j < n; ++j) attention[j] = 1.0f;
  Run run = compress("cam:sinks=2,merge_tokens=1,seed=3", attention, 10);
  const auto& settings = run.policy->diagnostics().settings();
  const int merged = std::stoi(settings.at("value_merges"));
  CHECK(merged + std::stoi(settings.at("masked_evictions")) == n - 10);
  CHECK(merged >= 510);
  CHECK(merged <= 690);
  // Another seed draws other masks.
  Run other = compress("cam:sinks=2,merge_tokens=1,seed=4", attention, 10);
  CHECK(other.policy->diagnostics().settings().at("value_merges") != settings.at("value_merges"));
}
