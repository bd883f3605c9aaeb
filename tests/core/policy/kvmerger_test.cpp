// KVMerger on explicit keys: merging sets found by hand from the cosine threshold, Gaussian weights and
// merged states written out as sums, the H2O special case, and budget mode on random caches.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "core/policy/kvmerger_split.h"
#include "core/policy/registry.h"
#include "tests/core/policy/policy_harness.h"

using namespace kvscope;
using namespace kvscope::test;
using policy::make_policy;

namespace {

// One layer, one KV head and one query head; entries with the given 2-d keys, values v_j = (j, 10 - j)
// and column sums (H2O's aggregated attention a_j, Eq. 6).
struct Prompt {
  std::vector<std::vector<float>> keys;
  std::vector<float> attention;

  cache::KVCache cache() const {
    cache::KVCache c(1, 1, 2);
    for (std::size_t j = 0; j < keys.size(); ++j) {
      const float v[2] = {static_cast<float>(j), 10.0f - static_cast<float>(j)};
      int32_t pos = static_cast<int32_t>(j);
      c.append(0, keys[j].data(), v, 1, &pos);
    }
    return c;
  }
  observation::AttentionObservation observation() const {
    observation::AttentionObservation obs;
    obs.layer = 0;
    obs.phase = observation::Phase::Prefill;
    obs.n_heads = 1;
    obs.n_kv_heads = 1;
    for (std::size_t j = 0; j < keys.size(); ++j) obs.query_positions.push_back(static_cast<int32_t>(j));
    obs.n_keys = {static_cast<int>(keys.size())};
    obs.column_sums = {attention};
    return obs;
  }
};

struct Outcome {
  cache::CacheEdit edit;
  cache::KVCache after{1, 1, 2};
  const policy::Diagnostics* diagnostics = nullptr;
};

Outcome run_once(policy::Policy& policy, const Prompt& p, int budget) {
  policy::RunInfo info;
  info.config.n_layers = 1;
  info.config.n_heads = 1;
  info.config.n_kv_heads = 1;
  info.config.head_dim = 2;
  info.prompt_length = static_cast<int>(p.keys.size());
  info.budget = budget;
  policy.begin(info);
  Outcome out;
  out.after = p.cache();
  out.edit = policy.after_layer(p.observation(), out.after);
  out.after.apply(out.edit);
  out.diagnostics = &policy.diagnostics();
  return out;
}

std::vector<float> unit(double degrees, double length = 1.0) {
  const double r = degrees * M_PI / 180.0;
  return {static_cast<float>(length * std::cos(r)), static_cast<float>(length * std::sin(r))};
}

double cos_between(const std::vector<float>& a, const std::vector<float>& b) {
  return (a[0] * b[0] + a[1] * b[1]) / (std::hypot(a[0], a[1]) * std::hypot(b[0], b[1]));
}

// 12 tokens. Recent: the last 2 (ratio 2/12); heavy hitter: token 0 (ratio 1/12). Candidates 1..9 have
// keys at angles 0,5,10 | 60,62,64,66 | 150 | 200 degrees, so with theta = 0.9 (about 25.8 degrees)
// Algorithm 1, walking back from token 9, finds the sets {9}, {8}, {4,5,6,7}, {1,2,3}.
Prompt clustered_prompt() {
  Prompt p;
  const double angle[12] = {300, 0, 5, 10, 60, 62, 64, 66, 150, 200, 100, 120};
  const double length[12] = {1, 1.0, 2.0, 1.5, 1.0, 1.2, 0.8, 1.1, 1, 1, 1, 1};
  for (int j = 0; j < 12; ++j) p.keys.push_back(unit(angle[j], length[j]));
  p.attention = {5.0f, 0.3f, 0.9f, 0.2f, 0.4f, 0.1f, 1.2f, 0.3f, 0.5f, 0.6f, 1.0f, 1.0f};
  return p;
}

}  // namespace

TEST_CASE("KVMerger finds contiguous sets by the cosine threshold and merges them around the pivot",
          "[policy][kvmerger]") {
  const Prompt p = clustered_prompt();
  auto inst = make_policy("kvmerger:mode=threshold,split=fixed,theta=0.9,recent_ratio=0.1667,hh_ratio=0.0834");
  const Outcome out = run_once(*inst.policy, p, 6);
  REQUIRE(out.edit.heads.size() == 1);
  const cache::HeadEdit& head = out.edit.heads[0];
  // Kept: the heavy hitter 0, the pivots 2 (of 1,2,3: a = .3,.9,.2) and 6 (of 4..7: a = .4,.1,1.2,.3), the
  // singletons 8 and 9, the recent 10 and 11.
  REQUIRE(std::vector<int32_t>(head.keep.begin(), head.keep.end()) == std::vector<int32_t>{0, 2, 6, 8, 9, 10, 11});
  REQUIRE(head.merges.size() == 2);

  struct Set {
    int pivot;
    std::vector<int> members;
  };
  for (const Set& s : {Set{2, {1, 2, 3}}, Set{6, {4, 5, 6, 7}}}) {
    const cache::MergeGroup* group = nullptr;
    for (const auto& g : head.merges)
      if (g.target == s.pivot) group = &g;
    REQUIRE(group != nullptr);
    // Hand computation of Eq. 7-8 with sigma = mean L2 distance from the pivot to the other members.
    const auto& kp = p.keys[s.pivot];
    std::vector<double> dist;
    double sigma = 0.0;
    for (int m : s.members) {
      dist.push_back(std::hypot(p.keys[m][0] - kp[0], p.keys[m][1] - kp[1]));
      sigma += dist.back();
    }
    sigma /= static_cast<double>(s.members.size() - 1);
    std::vector<double> w;
    double total = 0.0;
    for (double dd : dist) total += w.emplace_back(std::exp(-dd * dd / (2 * sigma * sigma)));
    for (double& x : w) x /= total;
    double sum = 0.0;
    for (float x : group->weights) sum += x;
    REQUIRE(sum == Approx(1.0).epsilon(1e-6));
    // The merged key and value equal the weighted sums, with the same weights for both (Eq. 5).
    double k0 = 0, k1 = 0, v0 = 0, v1 = 0;
    for (std::size_t i = 0; i < s.members.size(); ++i) {
      const int m = s.members[i];
      k0 += w[i] * p.keys[m][0];
      k1 += w[i] * p.keys[m][1];
      v0 += w[i] * m;
      v1 += w[i] * (10 - m);
    }
    int index = 0;
    while (out.after.positions(0, 0)[index] != s.pivot) ++index;
    REQUIRE(out.after.key(0, 0, index)[0] == Approx(k0).epsilon(1e-5));
    REQUIRE(out.after.key(0, 0, index)[1] == Approx(k1).epsilon(1e-5));
    REQUIRE(out.after.value(0, 0, index)[0] == Approx(v0).epsilon(1e-5));
    REQUIRE(out.after.value(0, 0, index)[1] == Approx(v1).epsilon(1e-5));
    REQUIRE(out.after.merge_counts(0, 0)[index] == static_cast<int>(s.members.size()));
  }
  // The sets are recorded: 4 sets, the two merged ones with their members and weights.
  const policy::Series* sets = out.diagnostics->find("kvmerger_sets");
  REQUIRE(sets != nullptr);
  REQUIRE(sets->shape[0] == 4);
  const policy::Series* members = out.diagnostics->find("kvmerger_members");
  REQUIRE(members != nullptr);
  REQUIRE(members->shape[0] == 7);
  // A set's intra-set similarity: the mean pairwise key cosine, here of {1, 2, 3}.
  for (int row = 0; row < sets->shape[0]; ++row) {
    const double* r = &sets->values[static_cast<std::size_t>(row) * sets->shape[1]];
    if (r[6] != 2) continue;  // pivot position
    REQUIRE(r[3] == 1);
    REQUIRE(r[4] == 3);
    REQUIRE(r[5] == 3);
    const double mean_cos =
        (cos_between(p.keys[1], p.keys[2]) + cos_between(p.keys[1], p.keys[3]) + cos_between(p.keys[2], p.keys[3])) /
        3.0;
    REQUIRE(r[9] == Approx(mean_cos).epsilon(1e-6));
  }
  REQUIRE(inst.policy->expected_length(0, 0, {observation::Phase::Prefill, 0, 12, true}) == -1);
}

TEST_CASE("KVMerger's sigma modes follow their definitions", "[policy][kvmerger]") {
  const Prompt p = clustered_prompt();
  // The set {4..7} around pivot 6.
  const auto& kp = p.keys[6];
  std::vector<double> dist;
  for (int m : {4, 5, 6, 7}) dist.push_back(std::hypot(p.keys[m][0] - kp[0], p.keys[m][1] - kp[1]));
  double sum_sq = 0.0;
  for (double d : dist) sum_sq += d * d;
  for (const auto& [mode, sigma] : std::vector<std::pair<std::string, double>>{
           {"sigma_mode=fixed,sigma=0.3", 0.3}, {"sigma_mode=eq7", sum_sq / (std::sqrt(2.0) * 4.0)}}) {
    auto inst =
        make_policy("kvmerger:mode=threshold,split=fixed,theta=0.9,recent_ratio=0.1667,hh_ratio=0.0834," + mode);
    const Outcome out = run_once(*inst.policy, p, 6);
    const cache::MergeGroup* group = nullptr;
    for (const auto& g : out.edit.heads[0].merges)
      if (g.target == 6) group = &g;
    REQUIRE(group != nullptr);
    std::vector<double> w;
    double total = 0.0;
    for (double d : dist) total += w.emplace_back(std::exp(-d * d / (2 * sigma * sigma)));
    // weights[0] is the pivot's, then the sources in order 4, 5, 7.
    REQUIRE(group->weights[0] == Approx(w[2] / total).epsilon(1e-5));
    REQUIRE(group->sources == std::vector<int32_t>{4, 5, 7});
    REQUIRE(group->weights[1] == Approx(w[0] / total).epsilon(1e-5));
    REQUIRE(group->weights[2] == Approx(w[1] / total).epsilon(1e-5));
    REQUIRE(group->weights[3] == Approx(w[3] / total).epsilon(1e-5));
  }
}

TEST_CASE("KVMerger with an unreachable threshold merges nothing", "[policy][kvmerger]") {
  const Prompt p = clustered_prompt();
  SECTION("threshold mode: every candidate is its own set, so nothing is compressed") {
    auto inst = make_policy("kvmerger:mode=threshold,theta=1");
    const Outcome out = run_once(*inst.policy, p, 6);
    REQUIRE(out.edit.empty());
    REQUIRE(out.after.size(0, 0) == 12);
  }
  SECTION("budget mode with theta fixed: heavy hitters plus recent tokens, i.e. H2O") {
    const int budget = 6, recent = 2;  // round(0.17 * 12) = 2 recent, round(0.12 * 12) = 1 heavy hitter
    auto inst = make_policy("kvmerger:theta_search=fixed,theta=1");
    const Outcome out = run_once(*inst.policy, p, budget);
    REQUIRE(out.edit.heads[0].merges.empty());
    // H2O by hand: the last `recent` tokens, and the top-(budget - recent) of the rest by attention.
    std::vector<std::pair<int, double>> scored;
    for (int j = 0; j < 12 - recent; ++j) scored.push_back({j, p.attention[j]});
    std::vector<int> want = top_k_by_hand(scored, budget - recent);
    for (int j = 12 - recent; j < 12; ++j) want.push_back(j);
    auto pos = out.after.positions(0, 0);
    REQUIRE(std::vector<int>(pos.begin(), pos.end()) == sorted(want));
    // ... with every entry untouched.
    for (int i = 0; i < out.after.size(0, 0); ++i) REQUIRE(out.after.key(0, 0, i)[0] == p.keys[pos[i]][0]);
  }
}

TEST_CASE("KVMerger's budget mode meets the budget exactly with valid merges", "[policy][kvmerger]") {
  for (const Shape& shape : {Shape{2, 9, 3, 8}, Shape{2, 3, 3, 8}})
    for (int budget : {6, 15, 24}) {
      AttentionTable table(shape, 64, 11);
      // Random keys are rarely within the paper's theta of each other: the searched threshold merges.
      auto inst = make_policy("kvmerger:theta_search=bisect,split=fixed");
      int groups = 0;
      // The harness checks cache sizes against expected_length = min(prompt, budget) + generated.
      PolicyDriver d(table, *inst.policy, 40, budget, 5);
      d.run(5, [&](const observation::StepInfo& step) {
        if (step.phase != observation::Phase::Prefill) return;
        // The last layer's edit (the harness keeps the last one applied).
        for (const auto& head : d.last_edit().heads)
          for (const auto& g : head.merges) {
            ++groups;
            double sum = 0.0;
            for (float w : g.weights) sum += w;
            REQUIRE(sum == Approx(1.0).epsilon(1e-6));
            // A set is contiguous among the candidates: no kept entry lies strictly inside it.
            std::vector<int32_t> members = g.sources;
            members.push_back(g.target);
            std::sort(members.begin(), members.end());
            for (int32_t k : head.keep)
              if (k != g.target) REQUIRE((k < members.front() || k > members.back()));
          }
      });
      // At 6 the 17% recent tokens fill the budget, leaving no room for merged entries.
      if (budget > 6) REQUIRE(groups > 0);
    }
}

TEST_CASE("KVMerger with a budget of the whole sequence keeps everything", "[policy][kvmerger]") {
  const Shape shape{2, 9, 3, 4};
  AttentionTable table(shape, 64, 5);
  auto inst = make_policy("kvmerger");
  PolicyDriver d(table, *inst.policy, 20, 20, 4);
  d.run(4);
  REQUIRE(d.edits() == 0);
  for (int l = 0; l < shape.layers; ++l)
    for (int g = 0; g < shape.kv_heads; ++g) REQUIRE(d.kept(l, g).size() == 24u);
}

TEST_CASE("KVMerger's anchor and contiguity options", "[policy][kvmerger]") {
  SECTION("the anchor is the set's latest key; `adjacent` chains through neighbours instead") {
    // Token 0 is the heavy hitter, 6 and 7 are recent; candidates 1..5 turn by 20 degrees each, and
    // theta = 0.9 allows about 25.8: from 5 back, 3 is 40 degrees off the anchor 5, 1 is 40 off 3.
    Prompt p;
    for (double angle : {300.0, 0.0, 20.0, 40.0, 60.0, 80.0, 150.0, 200.0}) p.keys.push_back(unit(angle));
    p.attention = {5.0f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 1.0f, 1.0f};
    auto latest = make_policy("kvmerger:mode=threshold,split=fixed,theta=0.9,recent_ratio=0.25,hh_ratio=0.125");
    const Outcome a = run_once(*latest.policy, p, 4);
    REQUIRE(a.edit.heads[0].merges.size() == 2);  // {2,3} and {4,5}; {1} alone
    REQUIRE(std::vector<int32_t>(a.edit.heads[0].keep.begin(), a.edit.heads[0].keep.end()) ==
            std::vector<int32_t>{0, 1, 3, 5, 6, 7});
    auto adjacent =
        make_policy("kvmerger:mode=threshold,split=fixed,theta=0.9,recent_ratio=0.25,hh_ratio=0.125,anchor=adjacent");
    const Outcome b = run_once(*adjacent.policy, p, 4);
    REQUIRE(b.edit.heads[0].merges.size() == 1);  // {1..5} around pivot 5
    REQUIRE(b.edit.heads[0].merges[0].target == 5);
    REQUIRE(b.edit.heads[0].merges[0].sources == std::vector<int32_t>{1, 2, 3, 4});
  }
  SECTION("sets stop at a kept token unless contiguity=list") {
    Prompt p;
    for (double length : {1.0, 1.1, 1.2, 1.0, 1.3, 1.4, 1.0, 1.0}) p.keys.push_back(unit(10.0, length));
    p.attention = {0.1f, 0.5f, 0.2f, 5.0f, 0.3f, 0.2f, 1.0f, 1.0f};  // token 3 is the heavy hitter
    auto runs = make_policy("kvmerger:mode=threshold,split=fixed,recent_ratio=0.25,hh_ratio=0.125");
    const Outcome a = run_once(*runs.policy, p, 4);
    REQUIRE(a.edit.heads[0].merges.size() == 2);  // {0,1,2} around 1, {4,5} around 4
    REQUIRE(std::vector<int32_t>(a.edit.heads[0].keep.begin(), a.edit.heads[0].keep.end()) ==
            std::vector<int32_t>{1, 3, 4, 6, 7});
    auto list = make_policy("kvmerger:mode=threshold,split=fixed,recent_ratio=0.25,hh_ratio=0.125,contiguity=list");
    const Outcome b = run_once(*list.policy, p, 4);
    REQUIRE(b.edit.heads[0].merges.size() == 1);
    REQUIRE(b.edit.heads[0].merges[0].target == 1);
    REQUIRE(b.edit.heads[0].merges[0].sources == std::vector<int32_t>{0, 2, 4, 5});
  }
}

TEST_CASE("KVMerger's recent / heavy split follows the budget through the paper's two configurations",
          "[policy][kvmerger]") {
  using policy::kvmerger_shares;
  // §6.1's anchors.
  CHECK(kvmerger_shares(0.50).recent == Approx(0.17));
  CHECK(kvmerger_shares(0.50).heavy == Approx(0.12));
  CHECK(kvmerger_shares(0.35).recent == Approx(0.08));
  CHECK(kvmerger_shares(0.35).heavy == Approx(0.02));
  // Halfway between them, halfway between their shares.
  CHECK(kvmerger_shares(0.425).recent == Approx(0.125));
  CHECK(kvmerger_shares(0.425).heavy == Approx(0.07));
  // Outside, the nearest anchor's proportion to the budget.
  CHECK(kvmerger_shares(0.20).recent == Approx(0.08 / 0.35 * 0.20));
  CHECK(kvmerger_shares(0.20).heavy == Approx(0.02 / 0.35 * 0.20));
  CHECK(kvmerger_shares(0.80).recent == Approx(0.17 / 0.50 * 0.80));
  CHECK(kvmerger_shares(0.80).heavy == Approx(0.12 / 0.50 * 0.80));
  // At 20-25 % the fixed 0.17 / 0.12 leave nothing to merge; the rule leaves most of the budget.
  for (double r : {0.20, 0.25}) {
    const auto s = kvmerger_shares(r);
    CHECK(r - 0.17 - 0.12 < 0.0);
    CHECK(r - s.recent - s.heavy == Approx(r * (1.0 - 0.10 / 0.35)));
  }
}

TEST_CASE("At a 25% budget the fixed split leaves no room to merge and says so; the budget split merges",
          "[policy][kvmerger]") {
  const Prompt p = clustered_prompt();
  const observation::StepInfo prefill{observation::Phase::Prefill, 0, 12, true};
  SECTION("split=fixed: round(0.17 x 12) = 2 recent and round(0.12 x 12) = 1 heavy hitter fill the budget of 3") {
    auto inst = make_policy("kvmerger:split=fixed");
    Outcome out = run_once(*inst.policy, p, 3);
    inst.policy->after_step(prefill, out.after);
    REQUIRE(out.edit.heads[0].merges.empty());
    auto pos = out.after.positions(0, 0);
    REQUIRE(std::vector<int>(pos.begin(), pos.end()) == std::vector<int>{0, 10, 11});  // heavy 0, recent 10-11
    REQUIRE(inst.policy->diagnostics().settings().at("heads_without_room_to_merge") == "1");
    REQUIRE(inst.policy->diagnostics().warnings().size() == 1);
    CHECK_THAT(inst.policy->diagnostics().warnings()[0], Catch::Contains("nothing is merged"));
  }
  SECTION("split=budget: round(0.057 x 12) = 1 recent, no heavy hitter, room for 2 merged entries") {
    // Algorithm 1 at the paper's theta = 0.75 (41.4 degrees) over candidates 0..10 finds {0}, {1,2,3},
    // {4,5,6,7}, {8}, {9}, {10}; attention mass 5.0, 1.4, 2.0, 0.5, 0.6, 1.0, so {0} and {4..7} stay, the
    // latter merged into its pivot 6 (a = 1.2).
    auto inst = make_policy("kvmerger");
    Outcome out = run_once(*inst.policy, p, 3);
    inst.policy->after_step(prefill, out.after);
    auto pos = out.after.positions(0, 0);
    REQUIRE(std::vector<int>(pos.begin(), pos.end()) == std::vector<int>{0, 6, 11});
    REQUIRE(out.edit.heads[0].merges.size() == 1);
    CHECK(out.edit.heads[0].merges[0].target == 6);
    CHECK(inst.policy->diagnostics().warnings().empty());
    const auto& settings = inst.policy->diagnostics().settings();
    CHECK(settings.at("recent_tokens") == "1");
    CHECK(settings.at("heavy_tokens") == "0");
    CHECK(settings.at("theta_used") == "[[0.750000]]");
  }
}

TEST_CASE("KVMerger's ablations: random pivot (Table 3) and average merge (Table 4)", "[policy][kvmerger]") {
  const Prompt p = clustered_prompt();
  const std::string base = "kvmerger:mode=threshold,split=fixed,theta=0.9,recent_ratio=0.1667,hh_ratio=0.0834";
  SECTION("average: the merged key of {4,5,6,7} is their plain mean, at the pivot 6") {
    auto inst = make_policy(base + ",merge_weights=average");
    const Outcome out = run_once(*inst.policy, p, 6);
    auto pos = out.after.positions(0, 0);
    const auto it = std::find(pos.begin(), pos.end(), 6);
    REQUIRE(it != pos.end());
    const int i = static_cast<int>(it - pos.begin());
    for (int t = 0; t < 2; ++t) {
      const double mean = (p.keys[4][t] + p.keys[5][t] + p.keys[6][t] + p.keys[7][t]) / 4.0;
      CHECK(out.after.key(0, 0, i)[t] == Approx(mean).epsilon(1e-5));
    }
  }
  SECTION("random: each set keeps one of its own members as the pivot, not always the most attended one") {
    bool other_than_six = false;
    for (int seed = 0; seed < 10; ++seed) {
      auto inst = make_policy(base + ",pivot=random,pivot_seed=" + std::to_string(seed));
      const Outcome out = run_once(*inst.policy, p, 6);
      auto pos = out.after.positions(0, 0);
      const std::vector<int> kept(pos.begin(), pos.end());
      // Sets {1,2,3} and {4,5,6,7} keep one member each; 0 (heavy), 8, 9 (singletons), 10, 11 (recent) stay.
      REQUIRE(kept.size() == 7u);
      const int in_first =
          static_cast<int>(std::count_if(kept.begin(), kept.end(), [](int x) { return x >= 1 && x <= 3; }));
      const int in_second =
          static_cast<int>(std::count_if(kept.begin(), kept.end(), [](int x) { return x >= 4 && x <= 7; }));
      REQUIRE(in_first == 1);
      REQUIRE(in_second == 1);
      other_than_six = other_than_six || std::find(kept.begin(), kept.end(), 6) == kept.end();
    }
    CHECK(other_than_six);
  }
}
