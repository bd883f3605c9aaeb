// D2O against plain reference computations: the eq.-5 allocation from the variance of hand-summed attention
// columns, a hand-written D2O (H2O eviction, cosine matching, EMA threshold, eq.-12 merges) run in lockstep
// with the policy, an explicit merge worked out on chosen keys, and the equivalence with H2O when no
// similarity can reach the threshold. References use the attention table and nested loops only.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/policy/registry.h"
#include "tests/core/policy/policy_harness.h"

using namespace kvscope;
using namespace kvscope::test;
using policy::make_policy;

namespace {

const double kE = std::exp(1.0);

// Forwards to a policy and lets the test see each observation and the freshly appended cache entries
// before the policy acts on them.
class Tap final : public policy::Policy {
 public:
  using Hook = std::function<void(const observation::AttentionObservation&, const cache::KVCache&)>;
  Tap(policy::Policy& inner, Hook hook) : inner_(inner), hook_(std::move(hook)) {}
  std::string name() const override { return inner_.name(); }
  observation::ObservationRequest request(int layer, Phase phase) const override { return inner_.request(layer, phase); }
  int prefill_block_size() const override { return inner_.prefill_block_size(); }
  void begin(const policy::RunInfo& info) override { inner_.begin(info); }
  cache::CacheEdit after_layer(const observation::AttentionObservation& obs, cache::KVCache& cache) override {
    hook_(obs, cache);
    return inner_.after_layer(obs, cache);
  }
  cache::CacheEdit after_step(const observation::StepInfo& step, cache::KVCache& cache) override {
    return inner_.after_step(step, cache);
  }
  int expected_length(int layer, int kv_head, const observation::StepInfo& step) const override {
    return inner_.expected_length(layer, kv_head, step);
  }
  std::vector<int> layer_budgets() const override { return inner_.layer_budgets(); }

 private:
  policy::Policy& inner_;
  Hook hook_;
};

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0.0, na = 0.0, nb = 0.0;
  for (std::size_t t = 0; t < a.size(); ++t) {
    dot += a[t] * b[t];
    na += a[t] * a[t];
    nb += b[t] * b[t];
  }
  return na > 0.0 && nb > 0.0 ? dot / std::sqrt(na * nb) : 0.0;
}

// Population variance of the head-mean attention-column sums of a layer's prompt (D2O eq. 4).
double variance_by_hand(const AttentionTable& table, int layer, int prompt) {
  const Shape& s = table.shape();
  std::vector<int> keys;
  for (int j = 0; j < prompt; ++j) keys.push_back(j);
  std::vector<double> col(prompt, 0.0);
  for (int h = 0; h < s.heads; ++h)
    for (int q = 0; q < prompt; ++q) {
      const auto p = table.row(layer, h, q, keys);
      for (int j = 0; j < prompt; ++j) col[j] += p[j] / s.heads;
    }
  double mean = 0.0, var = 0.0;
  for (double c : col) mean += c / prompt;
  for (double c : col) var += (c - mean) * (c - mean) / prompt;
  return var;
}

// Largest remainder of total * w_i / sum w (no clamp binds in the cases that use it; checked there).
std::vector<int> largest_remainder(const std::vector<double>& w, long total) {
  double sum = 0.0;
  for (double x : w) sum += x;
  std::vector<int> out(w.size());
  std::vector<std::pair<double, int>> frac;
  long given = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double exact = total * w[i] / sum;
    out[i] = static_cast<int>(std::floor(exact));
    given += out[i];
    frac.push_back({exact - out[i], static_cast<int>(i)});
  }
  std::stable_sort(frac.begin(), frac.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t i = 0; given < total; ++i, ++given) ++out[frac[i].second];
  return out;
}

// D2O written out plainly for one run, fed the same attention table and the same appended keys.
struct RefD2O {
  struct Entry {
    int pos;
    std::vector<double> key, value;
    double score = 0.0;
  };
  struct Head {
    std::vector<Entry> entries;
    bool defined = false;
    double tau = std::numeric_limits<double>::quiet_NaN();
  };

  Shape shape;
  int sinks = 4;
  double ratio = 3.0, beta = 0.7;
  std::string threshold = "ema";
  double fixed = 1.0;
  bool average = false;
  std::vector<int> capacity;
  std::vector<Head> heads;
  std::vector<int> merged, discarded;  // per layer, this step

  explicit RefD2O(const Shape& s) : shape(s), heads(static_cast<std::size_t>(s.layers) * s.kv_heads) {
    merged.assign(s.layers, 0);
    discarded.assign(s.layers, 0);
  }
  Head& at(int l, int g) { return heads[static_cast<std::size_t>(l) * shape.kv_heads + g]; }

  void observe(const AttentionTable& table, const observation::AttentionObservation& obs, const cache::KVCache& cache) {
    const int l = obs.layer, n = obs.n_queries(), d = shape.head_dim;
    for (int g = 0; g < shape.kv_heads; ++g) {
      Head& head = at(l, g);
      const int size = cache.size(l, g);
      for (int i = size - n; i < size; ++i) {
        Entry e;
        e.pos = cache.positions(l, g)[i];
        e.key.assign(cache.key(l, g, i), cache.key(l, g, i) + d);
        e.value.assign(cache.value(l, g, i), cache.value(l, g, i) + d);
        head.entries.push_back(e);
      }
      std::vector<int> keys;
      for (const Entry& e : head.entries) keys.push_back(e.pos);
      // Eq. 6: accumulated attention, summed over the query heads of the KV head.
      for (int h = g * shape.group(); h < (g + 1) * shape.group(); ++h)
        for (int q : obs.query_positions) {
          const auto p = table.row(l, h, q, keys);
          for (std::size_t j = 0; j < keys.size(); ++j) head.entries[j].score += p[j];
        }
      if (obs.phase == Phase::Decode) evict(l, g);
    }
  }

  void evict(int l, int g) {
    Head& head = at(l, g);
    const int n = static_cast<int>(head.entries.size()), c = capacity[l];
    if (n <= c) return;
    const int t = std::min(sinks, c);
    const int m = static_cast<int>(std::floor((c - t) / (ratio + 1.0)));
    std::vector<char> keep(n, 0);
    for (int i = 0; i < t; ++i) keep[i] = 1;
    for (int i = n - m; i < n; ++i) keep[i] = 1;
    std::vector<std::pair<int, double>> middle;
    for (int i = t; i < n - m; ++i) middle.push_back({i, head.entries[i].score});
    for (int i : top_k_by_hand(middle, c - t - m)) keep[i] = 1;

    std::vector<int> evicted, nearest;
    std::vector<double> best;
    for (int i = 0; i < n; ++i) {
      if (keep[i]) continue;
      double u_best = -2.0;
      int j_best = -1;
      for (int j = 0; j < n; ++j)
        if (keep[j]) {
          const double u = cosine(head.entries[i].key, head.entries[j].key);
          if (u > u_best) u_best = u, j_best = j;
        }
      evicted.push_back(i);
      best.push_back(u_best);
      nearest.push_back(j_best);
    }
    std::vector<char> merge(evicted.size(), 0);
    if (!head.defined) {
      double sum = 0.0;
      for (double u : best) sum += u;
      head.tau = sum / best.size();
      head.defined = true;
      for (std::size_t e = 0; e < best.size(); ++e) merge[e] = best[e] >= head.tau;
    } else {
      for (std::size_t e = 0; e < best.size(); ++e) {
        const double old = head.tau;
        head.tau = beta * best[e] + (1.0 - beta) * old;
        merge[e] = beta >= 1.0 || best[e] >= old;
      }
    }
    for (std::size_t e = 0; e < best.size(); ++e) {
      if (threshold == "none") merge[e] = 1;
      if (threshold == "fixed") merge[e] = best[e] >= fixed;
      ++(merge[e] ? merged : discarded)[l];
    }
    for (int j = 0; j < n; ++j) {
      std::vector<std::size_t> group;
      for (std::size_t e = 0; e < evicted.size(); ++e)
        if (merge[e] && nearest[e] == j) group.push_back(e);
      if (group.empty()) continue;
      double z = kE;
      for (std::size_t e : group) z += std::exp(best[e]);
      const double wc = average ? 1.0 / (group.size() + 1) : kE / z;
      Entry& target = head.entries[j];
      std::vector<double> k(target.key.size()), v(target.value.size());
      for (std::size_t x = 0; x < k.size(); ++x) k[x] = wc * target.key[x], v[x] = wc * target.value[x];
      for (std::size_t e : group) {
        const double we = average ? 1.0 / (group.size() + 1) : std::exp(best[e]) / z;
        const Entry& src = head.entries[evicted[e]];
        for (std::size_t x = 0; x < k.size(); ++x) k[x] += we * src.key[x], v[x] += we * src.value[x];
      }
      target.key = k;
      target.value = v;
    }
    std::vector<Entry> rest;
    for (int i = 0; i < n; ++i)
      if (keep[i]) rest.push_back(head.entries[i]);
    head.entries = rest;
  }
};

const policy::Series& series(const policy::Policy& p, const std::string& name) {
  const policy::Series* s = p.diagnostics().find(name);
  INFO("diagnostic " << name);
  REQUIRE(s != nullptr);
  return *s;
}

// The last row of a [step][column] diagnostic.
std::vector<double> last_row(const policy::Series& s) {
  const int width = s.shape.at(1);
  return {s.values.end() - width, s.values.end()};
}

}  // namespace

TEST_CASE("d2o layer budgets follow the inverse-variance softmax of eq. 5", "[policy][d2o]") {
  const Shape shape{5, 9, 3, 4};
  const int prompt = 40, budget = 14;
  AttentionTable table(shape, 64, 21);
  std::vector<double> var(shape.layers);
  for (int l = 0; l < shape.layers; ++l) var[l] = variance_by_hand(table, l, prompt);
  double mean = 0.0, sd = 0.0;
  for (double v : var) mean += v / shape.layers;
  for (double v : var) sd += (v - mean) * (v - mean) / shape.layers;
  sd = std::sqrt(sd);

  struct Case {
    std::string norm;
    std::function<double(double)> logit;  // softmax input per layer; empty for reciprocal/uniform
  };
  const std::vector<Case> cases = {
      {"relative", [&](double f) { return -f / mean; }},
      {"raw", [&](double f) { return -f; }},
      {"per_n", [&](double f) { return -f / (prompt - 1); }},
      {"zscore", [&](double f) { return -(f - mean) / sd; }},
      {"reciprocal", {}},
      {"uniform", {}},
  };
  for (const Case& c : cases) {
    INFO("variance_norm=" << c.norm);
    std::vector<double> w(shape.layers);
    for (int l = 0; l < shape.layers; ++l)
      w[l] = c.norm == "reciprocal" ? 1.0 / var[l] : c.norm == "uniform" ? 1.0 : std::exp(c.logit(var[l]));
    double total = 0.0;
    for (double x : w) total += x;
    for (double& x : w) x /= total;

    auto inst = make_policy("d2o:min_layer_tokens=1,variance_norm=" + c.norm);
    PolicyDriver d(table, *inst.policy, prompt, budget, 0);
    d.run(0);
    const auto& variance = series(*inst.policy, "layer_variance");
    const auto& share = series(*inst.policy, "layer_share");
    for (int l = 0; l < shape.layers; ++l) {
      CHECK(variance.values[l] == Approx(var[l]).epsilon(1e-4));
      CHECK(share.values[l] == Approx(w[l]).epsilon(1e-4));
    }
    // S_l = alpha_l * n with alpha_l = L * rho * w_l, rho = budget / n: L * budget tokens in all.
    std::vector<int> want = largest_remainder(w, static_cast<long>(shape.layers) * budget);
    bool clamped = false;
    for (int b : want) clamped = clamped || b < 1 || b > prompt;
    if (!clamped) CHECK(inst.policy->layer_budgets() == want);
    long sum = 0;
    for (int b : inst.policy->layer_budgets()) sum += b;
    CHECK(sum == static_cast<long>(shape.layers) * budget);
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.kv_heads; ++g) CHECK(d.cache().size(l, g) == inst.policy->layer_budgets()[l]);
  }
}

TEST_CASE("d2o clamps layer budgets to [min_layer_tokens, n] and keeps the total", "[policy][d2o]") {
  const Shape shape{6, 3, 1, 4};
  AttentionTable table(shape, 64, 22);
  // The literal exp(-F_v) concentrates the budget; the clamp water-fills what a layer cannot hold.
  auto inst = make_policy("d2o:variance_norm=raw,variance_temperature=0.001");
  PolicyDriver d(table, *inst.policy, 30, 20, 0);
  d.run(0);
  long sum = 0;
  for (int b : inst.policy->layer_budgets()) {
    CHECK(b >= 12);
    CHECK(b <= 30);
    sum += b;
  }
  CHECK(sum == 6 * 20);
}

TEST_CASE("d2o matches a hand-written D2O step by step", "[policy][d2o]") {
  struct Case {
    std::string spec;
    double beta;
    std::string threshold;
    double fixed;
    bool average;
    int sinks;
  };
  const std::vector<Case> cases = {
      {"d2o", 0.7, "ema", 1.0, false, 4},
      {"d2o:beta=0.5,merge=average", 0.5, "ema", 1.0, true, 4},
      {"d2o:beta=1", 1.0, "ema", 1.0, false, 4},
      {"d2o:threshold=none,sinks=2", 0.7, "none", 1.0, false, 2},
      {"d2o:threshold=fixed,fixed_threshold=0.6,heavy_recent_ratio=1", 0.7, "fixed", 0.6, false, 4},
  };
  for (const Shape& shape : {Shape{3, 9, 3, 4}, Shape{2, 3, 3, 4}})
    for (const Case& c : cases) {
      INFO(c.spec << " heads " << shape.heads);
      AttentionTable table(shape, 64, 23);
      // Layer budgets that differ (a sharper softmax, a low floor) so per-layer capacities are exercised.
      auto inst = make_policy(c.spec + (c.spec.find(':') == std::string::npos ? ":" : ",") +
                              "variance_temperature=0.2,min_layer_tokens=6");
      RefD2O ref(shape);
      ref.beta = c.beta;
      ref.threshold = c.threshold;
      ref.fixed = c.fixed;
      ref.average = c.average;
      ref.sinks = c.sinks;
      ref.ratio = inst.params.get_float("heavy_recent_ratio");
      Tap tap(*inst.policy, [&](const observation::AttentionObservation& obs, const cache::KVCache& cache) {
        ref.observe(table, obs, cache);
      });
      const int prompt = 30, budget = 14, decode = 12;
      PolicyDriver d(table, tap, prompt, budget, decode);
      int total_merged = 0;
      d.run(decode, [&](const observation::StepInfo& step) {
        if (step.phase == Phase::Prefill) {
          ref.capacity = inst.policy->layer_budgets();
          for (int l = 0; l < shape.layers; ++l)
            for (int g = 0; g < shape.kv_heads; ++g) ref.evict(l, g);
        }
        const auto tau = last_row(series(*inst.policy, "threshold"));
        const auto merged = last_row(series(*inst.policy, "merged"));
        const auto discarded = last_row(series(*inst.policy, "discarded"));
        for (int l = 0; l < shape.layers; ++l) {
          INFO("layer " << l << (step.phase == Phase::Prefill ? " prefill" : " decode ") << step.step);
          CHECK(merged[l] == ref.merged[l]);
          CHECK(discarded[l] == ref.discarded[l]);
          total_merged += ref.merged[l];
          for (int g = 0; g < shape.kv_heads; ++g) {
            INFO("kv head " << g);
            const RefD2O::Head& head = ref.at(l, g);
            REQUIRE(d.cache().size(l, g) == static_cast<int>(head.entries.size()));
            for (std::size_t i = 0; i < head.entries.size(); ++i) {
              REQUIRE(d.cache().positions(l, g)[i] == head.entries[i].pos);
              for (int x = 0; x < shape.head_dim; ++x) {
                REQUIRE(d.cache().key(l, g, i)[x] == Approx(head.entries[i].key[x]).margin(1e-4));
                REQUIRE(d.cache().value(l, g, i)[x] == Approx(head.entries[i].value[x]).margin(1e-4));
              }
            }
            const double t = tau[static_cast<std::size_t>(l) * shape.kv_heads + g];
            if (head.defined) CHECK(t == Approx(head.tau).margin(1e-5));
            else CHECK(std::isnan(t));
          }
        }
        std::fill(ref.merged.begin(), ref.merged.end(), 0);
        std::fill(ref.discarded.begin(), ref.discarded.end(), 0);
        for (int l = 0; l < shape.layers; ++l)
          for (int g = 0; g < shape.kv_heads; ++g)
            REQUIRE(d.cache().size(l, g) == std::min(step.seq_len, inst.policy->layer_budgets()[l]));
      });
      CHECK(total_merged > 0);  // the cases exercise merging, not only eviction
      CHECK(inst.policy->layer_budgets() != std::vector<int>(shape.layers, budget));
      CHECK(series(*inst.policy, "threshold").shape == std::vector<int>{1 + decode, shape.layers * shape.kv_heads});
    }
}

TEST_CASE("d2o merges with the eq.-12 weights written out by hand", "[policy][d2o]") {
  model::ModelConfig config;
  config.n_layers = 1;
  config.n_heads = 1;
  config.n_kv_heads = 1;
  config.head_dim = 4;
  config.dim = 4;
  config.context_length = 64;
  // Kept keys point along chosen directions; evicted 1 and 5 lean towards 0, 3 towards 2, and 8 is
  // unlike everything, so with tau_0 = mean of the best similarities it is the one discarded.
  const std::vector<std::vector<float>> keys = {
      {1, 0, 0, 0},      {0.9f, 0.1f, 0, 0}, {0, 1, 0, 0},    {0, 0.95f, 0.3f, 0}, {0, 0, 1, 0},
      {0.8f, 0, 0, 0.3f}, {0, 0, 0, 1},       {1, 1, 0, 0},    {-1, 0.2f, 0, -0.1f}, {0, 0, 1, 1}};
  // Accumulated attention: sink 0 and recent 9 stay; the top four of 1..8 are 2, 4, 6, 7.
  const std::vector<float> scores = {5, 0.1f, 3, 0.2f, 2.5f, 0.3f, 2, 1.5f, 0.4f, 1};
  cache::KVCache cache(1, 1, 4);
  for (int t = 0; t < 10; ++t) {
    const std::vector<float> v = {static_cast<float>(t), -2.0f * t, 0.5f, 1.0f / (t + 1)};
    const int32_t pos = t;
    cache.append(0, keys[t].data(), v.data(), 1, &pos);
  }
  std::vector<std::vector<float>> values;
  for (int t = 0; t < 10; ++t) values.emplace_back(cache.value(0, 0, t), cache.value(0, 0, t) + 4);

  auto inst = make_policy("d2o:sinks=1");
  policy::RunInfo info;
  info.config = config;
  info.prompt_length = 10;
  info.budget = 6;
  inst.policy->begin(info);
  observation::AttentionObservation obs;
  obs.layer = 0;
  obs.phase = Phase::Prefill;
  obs.n_heads = 1;
  obs.n_kv_heads = 1;
  for (int t = 0; t < 10; ++t) obs.query_positions.push_back(t);
  obs.n_keys = {10};
  obs.column_sums = {scores};
  CHECK(inst.policy->after_layer(obs, cache).empty());
  const observation::StepInfo step{Phase::Prefill, 0, 10, true};
  const cache::CacheEdit edit = inst.policy->after_step(step, cache);
  REQUIRE(edit.heads.size() == 1);
  const cache::HeadEdit& h = edit.heads[0];
  CHECK(h.keep == std::vector<int32_t>{0, 2, 4, 6, 7, 9});

  auto cos = [&](int a, int b) {
    return cosine(std::vector<double>(keys[a].begin(), keys[a].end()), std::vector<double>(keys[b].begin(), keys[b].end()));
  };
  const double u1 = cos(1, 0), u3 = cos(3, 2), u5 = cos(5, 0), u8 = cos(8, 2);
  const double tau0 = (u1 + u3 + u5 + u8) / 4.0;  // eq. 10, t = 0
  REQUIRE(u8 < tau0);
  REQUIRE(std::min({u1, u3, u5}) >= tau0);
  // The recorded scores are the accumulated attention; the secondary ones the best similarity of each
  // evicted entry (NaN for kept entries, which were not compared).
  for (int t = 0; t < 10; ++t) CHECK(h.scores[t] == scores[t]);
  CHECK(h.secondary_scores[1] == Approx(u1));
  CHECK(h.secondary_scores[8] == Approx(u8));
  CHECK(std::isnan(h.secondary_scores[0]));

  REQUIRE(h.merges.size() == 2);
  const cache::MergeGroup& g0 = h.merges[0];
  const cache::MergeGroup& g2 = h.merges[1];
  CHECK(g0.target == 0);
  CHECK(g0.sources == std::vector<int32_t>{1, 5});
  CHECK(g2.target == 2);
  CHECK(g2.sources == std::vector<int32_t>{3});
  const double z0 = kE + std::exp(u1) + std::exp(u5), z2 = kE + std::exp(u3);
  CHECK(g0.weights[0] == Approx(kE / z0));
  CHECK(g0.weights[1] == Approx(std::exp(u1) / z0));
  CHECK(g0.weights[2] == Approx(std::exp(u5) / z0));
  CHECK(g2.weights[0] == Approx(kE / z2));
  CHECK(g2.weights[1] == Approx(std::exp(u3) / z2));
  for (const auto* g : {&g0, &g2}) {
    double sum = 0.0;
    for (float w : g->weights) sum += w;
    CHECK(sum == Approx(1.0).margin(1e-6));
    for (std::size_t i = 1; i < g->weights.size(); ++i) CHECK(g->weights[0] > g->weights[i]);  // u <= 1 = self
  }

  cache.apply(edit);
  REQUIRE(cache.size(0, 0) == 6);
  for (int x = 0; x < 4; ++x) {
    const double k0 = (kE * keys[0][x] + std::exp(u1) * keys[1][x] + std::exp(u5) * keys[5][x]) / z0;
    const double v0 = (kE * values[0][x] + std::exp(u1) * values[1][x] + std::exp(u5) * values[5][x]) / z0;
    const double k2 = (kE * keys[2][x] + std::exp(u3) * keys[3][x]) / z2;
    const double v2 = (kE * values[2][x] + std::exp(u3) * values[3][x]) / z2;
    CHECK(cache.key(0, 0, 0)[x] == Approx(k0).margin(1e-6));
    CHECK(cache.value(0, 0, 0)[x] == Approx(v0).margin(1e-6));
    CHECK(cache.key(0, 0, 1)[x] == Approx(k2).margin(1e-6));
    CHECK(cache.value(0, 0, 1)[x] == Approx(v2).margin(1e-6));
    CHECK(cache.key(0, 0, 2)[x] == keys[4][x]);  // nobody matched 4: unchanged
  }
  CHECK(cache.merge_counts(0, 0)[0] == 3);
  // Spec A6-8: a merge leaves the target's accumulated attention as it was.
  CHECK(cache.scores(0, 0)[0] == 5.0f);
  CHECK(cache.scores(0, 0)[1] == 3.0f);
  CHECK(inst.policy->expected_length(0, 0, step) == 6);
  REQUIRE(series(*inst.policy, "threshold").values.size() == 1);
  CHECK(series(*inst.policy, "threshold").values[0] == Approx(tau0).margin(1e-6));
  CHECK(series(*inst.policy, "merged").values == std::vector<double>{3});
  CHECK(series(*inst.policy, "discarded").values == std::vector<double>{1});
}

TEST_CASE("merged_score=add gives a merge target its sources' attention", "[policy][d2o]") {
  const Shape shape{1, 3, 3, 4};
  AttentionTable table(shape, 64, 24);
  auto keep = make_policy("d2o:threshold=none");
  auto add = make_policy("d2o:threshold=none,merged_score=add");
  PolicyDriver a(table, *keep.policy, 20, 8, 0), b(table, *add.policy, 20, 8, 0);
  a.run(0);
  b.run(0);
  double sum_a = 0.0, sum_b = 0.0;
  for (int g = 0; g < shape.kv_heads; ++g) {
    REQUIRE(a.kept(0, g) == b.kept(0, g));
    for (float s : a.cache().scores(0, g)) sum_a += s;
    for (float s : b.cache().scores(0, g)) sum_b += s;
  }
  // Every evicted entry merged into a kept one, so with `add` the kept scores hold all the attention:
  // sum over keys of the column sums = queries x query heads.
  CHECK(sum_b == Approx(20.0 * shape.heads).epsilon(1e-4));
  CHECK(sum_a < sum_b);
}

TEST_CASE("d2o's EMA threshold follows eq. 10 over the decode steps", "[policy][d2o]") {
  const Shape shape{2, 9, 3, 4};
  for (double beta : {0.5, 0.7, 0.9, 1.0}) {
    INFO("beta " << beta);
    AttentionTable table(shape, 96, 25);
    auto inst = make_policy("d2o:beta=" + std::to_string(beta));
    const int decode = 20;
    PolicyDriver d(table, *inst.policy, 24, 10, decode);
    d.run(decode);
    const auto& tau = series(*inst.policy, "threshold");
    const auto& sim = series(*inst.policy, "victim_similarity");
    const auto& merged = series(*inst.policy, "merged");
    const int width = shape.layers * shape.kv_heads;
    REQUIRE(tau.shape == std::vector<int>{1 + decode, width});
    for (int l = 0; l < shape.layers; ++l) {
      std::vector<double> merges(1 + decode, 0.0);
      for (int g = 0; g < shape.kv_heads; ++g) {
        const int col = l * shape.kv_heads + g;
        // Row 0: tau_0 is the mean best similarity of the prompt's evicted entries.
        double t = tau.values[col];
        CHECK(sim.values[col] == Approx(t));
        for (int step = 1; step <= decode; ++step) {
          const double u = sim.values[static_cast<std::size_t>(step) * width + col];
          const bool merge = beta >= 1.0 || u >= t;
          merges[step] += merge;
          t = beta * u + (1.0 - beta) * t;
          CHECK(tau.values[static_cast<std::size_t>(step) * width + col] == Approx(t).margin(1e-9));
        }
      }
      for (int step = 1; step <= decode; ++step) CHECK(merged.values[static_cast<std::size_t>(step) * shape.layers + l] == merges[step]);
      if (beta >= 1.0)
        for (int step = 1; step <= decode; ++step) CHECK(merges[step] == shape.kv_heads);
    }
  }
}

TEST_CASE("with no reachable threshold d2o keeps exactly what h2o keeps under the same allocation", "[policy][d2o]") {
  // Similarities never exceed 1, so a fixed threshold of 2 discards every victim: D2O without merging
  // is H2O with D2O's layer budgets. h2o has no sinks and rounds its recent share down, as d2o's
  // floor((S - T) / (N:M + 1)) does for T = 0 and N:M = 3.
  for (const Shape& shape : {Shape{4, 9, 3, 4}, Shape{3, 3, 3, 4}}) {
    INFO("heads " << shape.heads);
    AttentionTable table(shape, 64, 26);
    // A sharper softmax and a low floor make the layer budgets differ.
    const std::string allocation = "variance_temperature=0.2,min_layer_tokens=4";
    auto d2o = make_policy("d2o:sinks=0,threshold=fixed,fixed_threshold=2," + allocation);
    auto h2o = make_policy("h2o:allocation=d2o,recent_ratio=0.25," + allocation);
    const int prompt = 36, budget = 13, decode = 15;
    PolicyDriver a(table, *d2o.policy, prompt, budget, decode), b(table, *h2o.policy, prompt, budget, decode);
    std::vector<std::vector<std::vector<int>>> d2o_kept;
    a.run(decode, [&](const observation::StepInfo&) {
      std::vector<std::vector<int>> now;
      for (int l = 0; l < shape.layers; ++l)
        for (int g = 0; g < shape.kv_heads; ++g) now.push_back(a.kept(l, g));
      d2o_kept.push_back(now);
    });
    std::size_t step = 0;
    b.run(decode, [&](const observation::StepInfo&) {
      for (int l = 0; l < shape.layers; ++l)
        for (int g = 0; g < shape.kv_heads; ++g) {
          INFO("step " << step << " layer " << l << " kv head " << g);
          REQUIRE(b.kept(l, g) == d2o_kept[step][static_cast<std::size_t>(l) * shape.kv_heads + g]);
        }
      ++step;
    });
    CHECK(d2o.policy->layer_budgets() == h2o.policy->layer_budgets());
    CHECK(d2o.policy->layer_budgets() != std::vector<int>(shape.layers, budget));
    for (double m : series(*d2o.policy, "merged").values) CHECK(m == 0.0);
  }
}

TEST_CASE("with no reachable threshold d2o keeps what a hand-written H2O with sinks keeps", "[policy][d2o]") {
  const Shape shape{3, 9, 3, 4};
  AttentionTable table(shape, 64, 27);
  auto inst = make_policy("d2o:threshold=fixed,fixed_threshold=1.5");
  const int prompt = 32, budget = 16, decode = 10;
  // H2O by hand: accumulated attention per entry, T = 4 sinks, M = floor((S - T) / 4) recent, top N.
  std::vector<std::vector<std::pair<int, double>>> ref(static_cast<std::size_t>(shape.layers) * shape.kv_heads);
  Tap tap(*inst.policy, [&](const observation::AttentionObservation& obs, const cache::KVCache&) {
    for (int g = 0; g < shape.kv_heads; ++g) {
      auto& entries = ref[static_cast<std::size_t>(obs.layer) * shape.kv_heads + g];
      for (int q : obs.query_positions) entries.push_back({q, 0.0});
      std::vector<int> keys;
      for (const auto& e : entries) keys.push_back(e.first);
      for (int h = g * shape.group(); h < (g + 1) * shape.group(); ++h)
        for (int q : obs.query_positions) {
          const auto p = table.row(obs.layer, h, q, keys);
          for (std::size_t j = 0; j < keys.size(); ++j) entries[j].second += p[j];
        }
    }
  });
  PolicyDriver d(table, tap, prompt, budget, decode);
  d.run(decode, [&](const observation::StepInfo& step) {
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.kv_heads; ++g) {
        auto& entries = ref[static_cast<std::size_t>(l) * shape.kv_heads + g];
        const int n = static_cast<int>(entries.size()), s = inst.policy->layer_budgets()[l];
        if (n > s) {
          const int t = 4, m = (s - t) / 4;
          std::vector<std::pair<int, double>> middle;
          for (int i = t; i < n - m; ++i) middle.push_back({i, entries[i].second});
          std::vector<int> keep = top_k_by_hand(middle, s - t - m);
          for (int i = 0; i < t; ++i) keep.push_back(i);
          for (int i = n - m; i < n; ++i) keep.push_back(i);
          keep = sorted(keep);
          std::vector<std::pair<int, double>> rest;
          for (int i : keep) rest.push_back(entries[i]);
          entries = rest;
        }
        std::vector<int> want;
        for (const auto& e : entries) want.push_back(e.first);
        INFO("layer " << l << " kv head " << g << " step " << step.step);
        REQUIRE(d.kept(l, g) == want);
      }
  });
}

TEST_CASE("d2o with a budget that holds the whole run keeps everything", "[policy][d2o]") {
  for (const Shape& shape : {Shape{2, 9, 3, 4}, Shape{2, 3, 3, 4}}) {
    AttentionTable table(shape, 64, 28);
    auto inst = make_policy("d2o");
    const int prompt = 12, decode = 6;
    PolicyDriver d(table, *inst.policy, prompt, 30, decode);
    d.run(decode, [&](const observation::StepInfo& step) {
      for (int l = 0; l < shape.layers; ++l)
        for (int g = 0; g < shape.kv_heads; ++g) {
          REQUIRE(d.cache().size(l, g) == step.seq_len);
          for (int i = 0; i < step.seq_len; ++i) REQUIRE(d.cache().positions(l, g)[i] == i);
        }
    });
    CHECK(d.edits() == 0);
    CHECK(inst.policy->layer_budgets() == std::vector<int>(shape.layers, 30));
  }
}

TEST_CASE("d2o with a budget equal to the prompt holds each layer at the prompt length", "[policy][d2o]") {
  AttentionTable table(Shape{2, 9, 3, 4}, 64, 29);
  auto inst = make_policy("d2o");
  PolicyDriver d(table, *inst.policy, 12, 12, 5);
  d.run(5, [&](const observation::StepInfo&) {
    for (int l = 0; l < 2; ++l)
      for (int g = 0; g < 3; ++g) REQUIRE(d.cache().size(l, g) == 12);
  });
  CHECK(d.edits() == 5 * 2);  // nothing at prefill, then one victim per layer at every decode step
}

TEST_CASE("the d2o allocation serves other scorers", "[policy][d2o][allocation]") {
  const Shape shape{4, 9, 3, 4};
  AttentionTable table(shape, 64, 30);
  auto snap = make_policy("snapkv:window=4,allocation=d2o");
  auto d2o = make_policy("d2o:min_layer_tokens=1");
  PolicyDriver a(table, *snap.policy, 40, 16, 2), b(table, *d2o.policy, 40, 16, 2);
  a.run(2);
  b.run(2);
  const std::vector<int> budgets = snap.policy->layer_budgets();
  long sum = 0;
  for (int v : budgets) {
    CHECK(v >= 4 + 8);  // the window, and min_layer_tokens (12) above it
    sum += v;
  }
  CHECK(sum == 4 * 16);
  // Same variances, so the same softmax order: the layer d2o favours, snapkv's allocation favours too.
  const auto& va = series(*snap.policy, "layer_variance");
  const auto& vb = series(*d2o.policy, "layer_variance");
  for (int l = 0; l < shape.layers; ++l) CHECK(va.values[l] == Approx(vb.values[l]));
  for (int l = 0; l < shape.layers; ++l)
    for (int g = 0; g < shape.kv_heads; ++g) CHECK(a.cache().size(l, g) == budgets[l] + 2);
}

TEST_CASE("d2o parameters carry the paper's defaults", "[policy][d2o]") {
  const auto p = make_policy("d2o").params;
  CHECK(p.get_float("beta") == 0.7);
  CHECK(p.get_float("heavy_recent_ratio") == 3.0);
  CHECK(p.get_int("sinks") == 4);
  CHECK(p.get_choice("threshold") == "ema");
  CHECK(p.get_choice("merge") == "weighted");
  CHECK(p.get_choice("similarity") == "key");
  CHECK(p.get_choice("variance_norm") == "relative");
  CHECK(make_policy("d2o").policy->prefill_block_size() == 0);
  CHECK_THROWS_WITH(make_policy("d2o:beta=1.5"), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(make_policy("d2o:variance_norm=softmax"), Catch::Contains("relative"));
}

TEST_CASE("d2o merge=off makes D2O's choices and merges nothing (Table 6, one component at a time)", "[policy][d2o]") {
  const Shape shape{3, 9, 3, 4};
  AttentionTable table(shape, 64, 41);
  // threshold=none merges every victim, so the merging half is as active as it can be.
  auto on = make_policy("d2o:threshold=none"), off = make_policy("d2o:threshold=none,merge=off");
  PolicyDriver a(table, *on.policy, 40, 12, 4), b(table, *off.policy, 40, 12, 4);
  std::size_t merges_on = 0, merges_off = 0;
  a.run(4, [&](const observation::StepInfo&) {
    for (const auto& head : a.last_edit().heads) merges_on += head.merges.size();
  });
  b.run(4, [&](const observation::StepInfo&) {
    for (const auto& head : b.last_edit().heads) merges_off += head.merges.size();
  });
  CHECK(merges_on > 0);
  CHECK(merges_off == 0);
  // The attention table scores by position, so which entries stay does not depend on merging.
  for (int l = 0; l < shape.layers; ++l)
    for (int g = 0; g < shape.kv_heads; ++g) CHECK(a.kept(l, g) == b.kept(l, g));
}

TEST_CASE("d2o variance_norm=exp_decay gives each layer b * exp(-F_v) (Table 4's exponential decay)", "[policy][d2o]") {
  const Shape shape{5, 9, 3, 4};
  const int prompt = 40, budget = 14;
  AttentionTable table(shape, 64, 21);
  for (const double temperature : {1.0, 5.0}) {
    INFO("variance_temperature=" << temperature);
    auto inst = make_policy("d2o:min_layer_tokens=1,variance_norm=exp_decay,variance_temperature=" +
                            std::to_string(temperature));
    PolicyDriver d(table, *inst.policy, prompt, budget, 0);
    d.run(0);
    long total = 0;
    std::vector<int> want(shape.layers);
    for (int l = 0; l < shape.layers; ++l) {
      // alpha_l = rho * exp(-F_v^l / T), S_l = alpha_l * n = b * exp(-F_v^l / T), at least 1 token.
      want[l] = std::clamp(
          static_cast<int>(std::lround(budget * std::exp(-variance_by_hand(table, l, prompt) / temperature))), 1,
          prompt);
      total += static_cast<long>(want[l]) * shape.kv_heads;
    }
    CHECK(inst.policy->layer_budgets() == want);
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.kv_heads; ++g) CHECK(d.cache().size(l, g) == want[l]);
    const auto& diagnostics = inst.policy->diagnostics();
    CHECK(diagnostics.settings().at("allocated_tokens") == std::to_string(total));
    CHECK(total < static_cast<long>(shape.layers) * shape.kv_heads * budget);  // not a share of the total
    bool warned = false;
    for (const auto& w : diagnostics.warnings()) warned = warned || w.find("exp_decay") != std::string::npos;
    CHECK(warned);
  }
}

TEST_CASE("d2o allocation_level=head gives every (layer, KV head) its own budget (App. A.9, eq. 17)", "[policy][d2o]") {
  const Shape shape{4, 9, 3, 4};
  const int prompt = 40, budget = 14;
  AttentionTable table(shape, 64, 27);
  // Eq. 20 per KV head: the variance of its query heads' mean column sums, over every prompt query.
  std::vector<double> var;
  std::vector<int> keys;
  for (int j = 0; j < prompt; ++j) keys.push_back(j);
  for (int l = 0; l < shape.layers; ++l)
    for (int g = 0; g < shape.kv_heads; ++g) {
      std::vector<double> col(prompt, 0.0);
      for (int h = g * shape.group(); h < (g + 1) * shape.group(); ++h)
        for (int q = 0; q < prompt; ++q) {
          const auto p = table.row(l, h, q, keys);
          for (int j = 0; j < prompt; ++j) col[j] += p[j] / shape.group();
        }
      double mean = 0.0, v = 0.0;
      for (double c : col) mean += c / prompt;
      for (double c : col) v += (c - mean) * (c - mean) / prompt;
      var.push_back(v);
    }
  // Eq. 17 with the default relative normalisation: softmax of -F / mean F over all L * H heads, times
  // S_total = rho * L * H * n = L * H * b.
  double mean = 0.0;
  for (double v : var) mean += v / static_cast<double>(var.size());
  std::vector<double> w;
  for (double v : var) w.push_back(std::exp(-v / mean));
  const std::vector<int> want = largest_remainder(w, static_cast<long>(shape.layers) * shape.kv_heads * budget);
  for (int b : want) REQUIRE((b >= 1 && b <= prompt));  // no clamp binds, so the exact shares apply

  auto inst = make_policy("d2o:min_layer_tokens=1,allocation_level=head");
  PolicyDriver d(table, *inst.policy, prompt, budget, 3);
  bool heads_differ = false;
  d.run(3, [&](const observation::StepInfo&) {
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.kv_heads; ++g) {
        REQUIRE(d.cache().size(l, g) == want[l * shape.kv_heads + g]);
        heads_differ = heads_differ || want[l * shape.kv_heads + g] != want[l * shape.kv_heads];
      }
  });
  CHECK(heads_differ);
  const auto& head_share = series(*inst.policy, "head_share");
  double sum = 0.0;
  for (double x : w) sum += x;
  for (std::size_t i = 0; i < w.size(); ++i) CHECK(head_share.values[i] == Approx(w[i] / sum).epsilon(1e-4));
  CHECK(inst.policy->diagnostics().settings().at("allocation_level") == "\"head\"");
}
