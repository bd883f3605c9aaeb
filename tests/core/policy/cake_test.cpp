// CAKE against plain reference computations over an explicit attention table: entropy and variance of
// the last window (Eq. 4-6), budgets in proportion (Eq. 7), the Mean + gamma*Var indicator with average
// pooling (Eq. 11-12), decode eviction; cascading equals one-shot (Theorem 1) and budgets only shrink
// across stages (Proposition 1).
#include <catch2/catch.hpp>
#include <cmath>

#include "core/policy/cake_preference.h"
#include "core/policy/registry.h"
#include "tests/core/policy/policy_harness.h"

using namespace kvscope;
using namespace kvscope::test;
using policy::make_policy;

namespace {

std::vector<int> range(int begin, int end) {
  std::vector<int> v;
  for (int i = begin; i < end; ++i) v.push_back(i);
  return v;
}

struct Reference {
  std::vector<double> entropy, variance, preference;
  std::vector<int> budgets;            // B_l, without the window
  std::vector<std::vector<int>> kept;  // [layer * kv_heads + g] positions after prefill
};

// Window rows of query head h: p[r][j] for the last w prompt queries over all prompt keys.
std::vector<std::vector<double>> window_rows(const AttentionTable& t, int l, int h, int prompt, int w) {
  std::vector<std::vector<double>> rows;
  for (int q = prompt - w; q < prompt; ++q) rows.push_back(t.row(l, h, q, range(0, prompt)));
  return rows;
}

// avg_pool1d(kernel 5, stride 1, padding 2) with the zeros counted.
std::vector<double> avg_pool5(const std::vector<double>& x) {
  std::vector<double> out(x.size(), 0.0);
  for (int i = 0; i < static_cast<int>(x.size()); ++i) {
    for (int j = i - 2; j <= i + 2; ++j)
      if (j >= 0 && j < static_cast<int>(x.size())) out[i] += x[j];
    out[i] /= 5.0;
  }
  return out;
}

Reference reference(const AttentionTable& t, int prompt, int budget, int w, double gamma) {
  const Shape& s = t.shape();
  Reference ref;
  const int prefix = prompt - w;
  std::vector<std::vector<std::vector<double>>> indicator(
      s.layers, std::vector<std::vector<double>>(s.kv_heads, std::vector<double>(prefix, 0.0)));
  for (int l = 0; l < s.layers; ++l) {
    double H = 0.0, V = 0.0;
    for (int h = 0; h < s.heads; ++h) {
      const auto rows = window_rows(t, l, h, prompt, w);
      std::vector<double> ind(prefix);
      for (int j = 0; j < prefix; ++j) {
        double mean = 0.0;
        for (int r = 0; r < w; ++r) {
          H -= rows[r][j] * std::log(rows[r][j] + 1e-10);
          mean += rows[r][j] / w;
        }
        double var = 0.0;
        for (int r = 0; r < w; ++r) var += (rows[r][j] - mean) * (rows[r][j] - mean) / (w - 1);
        V += var;
        ind[j] = mean + gamma * var;
      }
      const auto pooled = avg_pool5(ind);
      for (int j = 0; j < prefix; ++j) indicator[l][h / s.group()][j] += pooled[j] / s.group();
    }
    ref.entropy.push_back(H);
    ref.variance.push_back(V);
    ref.preference.push_back(H * V);  // tau1 = tau2 = 1
  }
  // Eq. 7 over (budget - w) * L, floors plus the largest remainders (the tests keep every share below
  // the prompt, so no cap binds).
  double total_p = 0.0;
  for (double p : ref.preference) total_p += p;
  const int total = (budget - w) * s.layers;
  std::vector<std::pair<int, double>> remainders;
  int assigned = 0;
  for (int l = 0; l < s.layers; ++l) {
    const double share = ref.preference[l] / total_p * total;
    REQUIRE(share < prefix);
    ref.budgets.push_back(static_cast<int>(std::floor(share)));
    assigned += ref.budgets.back();
    remainders.push_back({l, share - std::floor(share)});
  }
  for (int l : top_k_by_hand(remainders, total - assigned)) ++ref.budgets[l];
  for (int l = 0; l < s.layers; ++l)
    for (int g = 0; g < s.kv_heads; ++g) {
      std::vector<std::pair<int, double>> scored;
      for (int j = 0; j < prefix; ++j) scored.push_back({j, indicator[l][g][j]});
      std::vector<int> keep = top_k_by_hand(scored, ref.budgets[l]);
      for (int j = prefix; j < prompt; ++j) keep.push_back(j);
      ref.kept.push_back(sorted(keep));
    }
  return ref;
}

}  // namespace

TEST_CASE("CAKE keeps the reference's entries after prefill, in both modes", "[policy][cake]") {
  const int prompt = 40, budget = 12, w = 4;
  // gamma = 1 as well: at the paper's 200 the variance term alone nearly decides the ranking.
  for (const Shape& shape : {Shape{4, 9, 3, 4}, Shape{3, 3, 3, 4}})
    for (const std::string mode : {"cascade", "oneshot"})
      for (double gamma : {200.0, 1.0}) {
        AttentionTable table(shape, 64, 21);
        const Reference ref = reference(table, prompt, budget, w, gamma);
        auto inst = make_policy("cake:window=4,mode=" + mode + ",gamma=" + std::to_string(gamma));
        PolicyDriver d(table, *inst.policy, prompt, budget, 0);
        d.run(0);
        for (int l = 0; l < shape.layers; ++l) {
          INFO(mode << " gamma " << gamma << " layer " << l);
          for (int g = 0; g < shape.kv_heads; ++g)
            REQUIRE(d.kept(l, g) == ref.kept[static_cast<std::size_t>(l) * shape.kv_heads + g]);
          REQUIRE(inst.policy->layer_budgets()[l] == ref.budgets[l] + w);
        }
        // H_l, V_l and P_l as recorded after the last stage.
        const policy::Diagnostics& diag = inst.policy->diagnostics();
        for (const auto& [name, want] :
             {std::pair{"cake_entropy", ref.entropy}, std::pair{"cake_variance", ref.variance},
              std::pair{"cake_preference", ref.preference}}) {
          const policy::Series* s = diag.find(name);
          REQUIRE(s != nullptr);
          REQUIRE(s->shape[0] == shape.layers);
          for (int l = 0; l < shape.layers; ++l)
            REQUIRE(s->values[static_cast<std::size_t>(shape.layers - 1) * shape.layers + l] ==
                    Approx(want[l]).epsilon(1e-4));
        }
      }
}

TEST_CASE("CAKE's cascade keeps exactly what one-shot eviction keeps, and budgets never grow", "[policy][cake]") {
  for (unsigned seed : {1u, 2u, 3u, 4u})
    for (const Shape& shape : {Shape{8, 9, 3, 4}, Shape{6, 3, 3, 4}})
      for (int budget : {6, 10, 20}) {
        const int prompt = 48, decode = 5;
        AttentionTable table(shape, 64, seed);
        auto cascade = make_policy("cake:window=4,mode=cascade");
        auto oneshot = make_policy("cake:window=4,mode=oneshot");
        PolicyDriver a(table, *cascade.policy, prompt, budget, decode),
            b(table, *oneshot.policy, prompt, budget, decode);
        a.run(decode);
        b.run(decode);
        for (int l = 0; l < shape.layers; ++l)
          for (int g = 0; g < shape.kv_heads; ++g) {
            INFO("seed " << seed << " budget " << budget << " layer " << l << " kv head " << g);
            REQUIRE(a.kept(l, g) == b.kept(l, g));
          }
        REQUIRE(cascade.policy->layer_budgets() == oneshot.policy->layer_budgets());

        // One row per stage; a layer's budget, once allocated, never grows (Proposition 1), and the last
        // stage holds L * budget entries per KV head.
        const policy::Series* s = cascade.policy->diagnostics().find("cake_budgets");
        REQUIRE(s != nullptr);
        REQUIRE(s->shape[0] == shape.layers);
        for (int l = 0; l < shape.layers; ++l) {
          double previous = 1e300;
          for (int m = 0; m < shape.layers; ++m) {
            const double v = s->values[static_cast<std::size_t>(m) * shape.layers + l];
            if (m < l) {
              REQUIRE(v == -1.0);
              continue;
            }
            REQUIRE(v <= previous);
            previous = v;
          }
        }
        double last = 0.0;
        for (int l = 0; l < shape.layers; ++l)
          last += s->values[static_cast<std::size_t>(shape.layers - 1) * shape.layers + l];
        REQUIRE(last == Approx(static_cast<double>(budget) * shape.layers));
      }
}

TEST_CASE("CAKE decoding evicts the lowest pooled current-query score and holds each layer's budget",
          "[policy][cake]") {
  const Shape shape{3, 9, 3, 4};
  const int prompt = 40, budget = 12, w = 4, decode = 6;
  AttentionTable table(shape, 64, 9);
  const Reference ref = reference(table, prompt, budget, w, 200.0);
  auto inst = make_policy("cake:window=4");
  std::vector<std::vector<int>> want = ref.kept;
  PolicyDriver d(table, *inst.policy, prompt, budget, decode);
  d.run(decode, [&](const observation::StepInfo& step) {
    if (step.phase == observation::Phase::Decode) {
      const int q = step.seq_len - 1;  // the new token's position
      for (int l = 0; l < shape.layers; ++l)
        for (int g = 0; g < shape.kv_heads; ++g) {
          std::vector<int>& keys = want[static_cast<std::size_t>(l) * shape.kv_heads + g];
          keys.push_back(q);
          const int prefix = static_cast<int>(keys.size()) - w;
          std::vector<double> score(prefix, 0.0);
          for (int k = 0; k < shape.group(); ++k) {
            const auto row = table.row(l, g * shape.group() + k, q, keys);
            const auto pooled = avg_pool5(std::vector<double>(row.begin(), row.begin() + prefix));
            for (int j = 0; j < prefix; ++j) score[j] += pooled[j] / shape.group();
          }
          std::vector<std::pair<int, double>> scored;
          for (int j = 0; j < prefix; ++j) scored.push_back({keys[j], score[j]});
          std::vector<int> keep = top_k_by_hand(scored, ref.budgets[l]);
          keep.insert(keep.end(), keys.end() - w, keys.end());
          keys = sorted(keep);
        }
    }
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.kv_heads; ++g) {
        INFO("layer " << l << " kv head " << g << " step " << step.step);
        REQUIRE(d.kept(l, g) == want[static_cast<std::size_t>(l) * shape.kv_heads + g]);
      }
  });
}

TEST_CASE("CAKE's decode=window option holds the budget too", "[policy][cake]") {
  const Shape shape{3, 9, 3, 4};
  AttentionTable table(shape, 64, 13);
  auto inst = make_policy("cake:window=4,decode=window");
  PolicyDriver d(table, *inst.policy, 40, 12, 6);  // the harness checks every length
  d.run(6);
  for (int l = 0; l < shape.layers; ++l)
    for (int g = 0; g < shape.kv_heads; ++g) {
      const auto kept = d.kept(l, g);
      REQUIRE(std::vector<int>(kept.end() - 4, kept.end()) == range(42, 46));
    }
}

TEST_CASE("CAKE with a budget of the whole sequence keeps everything", "[policy][cake]") {
  const Shape shape{3, 9, 3, 4};
  AttentionTable table(shape, 64, 5);
  for (const std::string mode : {"cascade", "oneshot"}) {
    auto inst = make_policy("cake:mode=" + mode);
    PolicyDriver d(table, *inst.policy, 20, 26, 6);
    d.run(6);
    REQUIRE(d.edits() == 0);
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.kv_heads; ++g) REQUIRE(d.kept(l, g) == range(0, 26));
  }
}

TEST_CASE("the cake allocation gives any scorer CAKE's layer budgets", "[policy][cake][allocation]") {
  const Shape shape{4, 9, 3, 4};
  const int prompt = 40, budget = 12, w = 4;
  AttentionTable table(shape, 64, 21);
  const Reference ref = reference(table, prompt, budget, w, 200.0);
  // SnapKV reserves its window of 4, which CAKE keeps on top of each layer's share too.
  auto inst = make_policy("snapkv:window=4,allocation=cake,cake_window=4");
  PolicyDriver d(table, *inst.policy, prompt, budget, 3);
  d.run(3);
  const std::vector<int> budgets = inst.policy->layer_budgets();
  for (int l = 0; l < shape.layers; ++l) REQUIRE(budgets[l] == ref.budgets[l] + w);
  const policy::Series* p = inst.policy->diagnostics().find("cake_preference");
  REQUIRE(p != nullptr);
  for (int l = 0; l < shape.layers; ++l) REQUIRE(p->values[l] == Approx(ref.preference[l]).epsilon(1e-4));
}

TEST_CASE("CAKE's ablations by hand: preference terms (App. I) and indicator forms (Table 3)", "[policy][cake]") {
  using policy::cake::IndicatorForm;
  using policy::cake::PreferenceTerms;
  const policy::cake::LayerStats stats{2.0, 0.25};
  CHECK(policy::cake::log_preference(stats, 0.5, 2.0) == Approx(std::log(2.0) / 0.5 + std::log(0.25) / 2.0));
  CHECK(policy::cake::log_preference(stats, 0.5, 2.0, PreferenceTerms::EntropyOnly) == Approx(std::log(2.0) / 0.5));
  CHECK(policy::cake::log_preference(stats, 0.5, 2.0, PreferenceTerms::VarianceOnly) == Approx(std::log(0.25) / 2.0));
  // A zero entropy does not matter to the variance-only preference.
  CHECK(policy::cake::log_preference({0.0, 0.25}, 1.0, 1.0, PreferenceTerms::VarianceOnly) == Approx(std::log(0.25)));

  // One head, a window of two rows over three keys: means 0.3, 0.45, 0.25; unbiased variances 0.08, 0.045, 0.005.
  observation::AttentionObservation obs;
  obs.n_heads = 1;
  obs.n_kv_heads = 1;
  obs.window = 2;
  obs.n_keys = {3};
  obs.window_rows = {{0.5f, 0.3f, 0.2f, 0.1f, 0.6f, 0.3f}};
  auto indicator = [&](IndicatorForm form) {
    return policy::cake::eviction_indicator(obs, 0, 3, 2, 10.0, 1, policy::Pooling::None, form);
  };
  const std::vector<std::pair<IndicatorForm, std::vector<double>>> expected = {
      {IndicatorForm::MeanPlusVariance, {0.3 + 10 * 0.08, 0.45 + 10 * 0.045, 0.25 + 10 * 0.005}},
      {IndicatorForm::Mean, {0.3, 0.45, 0.25}},
      {IndicatorForm::Variance, {0.08, 0.045, 0.005}},
      {IndicatorForm::Product, {0.3 * 0.08, 0.45 * 0.045, 0.25 * 0.005}}};
  for (const auto& [form, want] : expected) {
    const std::vector<float> got = indicator(form);
    REQUIRE(got.size() == 3u);
    for (int j = 0; j < 3; ++j) CHECK(got[j] == Approx(want[j]).epsilon(1e-5));
  }
}

TEST_CASE("CAKE's random allocation draws per layer and still spends the whole budget", "[policy][cake]") {
  const Shape shape{4, 3, 1, 4};
  AttentionTable table(shape, 80, 31);
  auto a = make_policy("cake:window=4,preference=random,preference_seed=1");
  auto b = make_policy("cake:window=4,preference=random,preference_seed=2");
  PolicyDriver da(table, *a.policy, 60, 16, 1), db(table, *b.policy, 60, 16, 1);
  da.run(1);
  db.run(1);
  const auto ba = a.policy->layer_budgets(), bb = b.policy->layer_budgets();
  long sum = 0;
  for (int v : ba) sum += v;
  CHECK(sum == 4 * 16);  // Eq. 7: the layers share L x b exactly, whatever the preferences
  CHECK(ba != bb);
}
