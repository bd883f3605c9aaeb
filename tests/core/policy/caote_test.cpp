// CAOTE against brute force: every score is checked against the attention output recomputed with the
// candidate really removed from the key set (softmax over the remaining keys), and the block-wise runs
// against a reference that rescores the whole cache by hand at every step.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "core/policy/registry.h"
#include "tests/core/policy/policy_harness.h"

using namespace kvscope;
using namespace kvscope::test;
using policy::make_policy;

namespace {

using Matrix = std::vector<std::vector<double>>;

std::vector<double> softmax_over(const std::vector<double>& logits, const std::vector<int>& present) {
  std::vector<double> p(logits.size(), 0.0);
  double top = -1e300, total = 0.0;
  for (int j : present) top = std::max(top, logits[j]);
  for (int j : present) total += p[j] = std::exp(logits[j] - top);
  for (double& x : p) x /= total;
  return p;
}

std::vector<double> output(const std::vector<double>& p, const Matrix& v) {
  std::vector<double> o(v[0].size(), 0.0);
  for (std::size_t j = 0; j < v.size(); ++j)
    for (std::size_t t = 0; t < o.size(); ++t) o[t] += p[j] * v[j][t];
  return o;
}

double distance(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (std::size_t t = 0; t < a.size(); ++t) s += (a[t] - b[t]) * (a[t] - b[t]);
  return std::sqrt(s);
}

// One layer, one KV head with `heads` query heads; n entries with explicit keys and values.
struct Explicit {
  int heads = 3, n = 6, d = 3;
  Matrix q = {{0.9, -0.4, 1.3}, {-1.1, 0.2, 0.5}, {0.3, 1.6, -0.7}};
  Matrix k = {{1.0, 0.0, 0.5},  {0.2, 1.2, -0.3}, {-0.8, 0.4, 0.9},
              {0.6, -1.0, 0.1}, {1.4, 0.7, -1.2}, {-0.3, -0.5, 1.1}};
  Matrix v = {{0.5, -1.0, 2.0}, {1.5, 0.3, -0.2}, {-0.7, 0.8, 0.4},
              {2.2, -0.1, 0.9}, {0.1, 1.9, -1.4}, {-1.3, 0.6, 0.0}};

  std::vector<double> logits(int h) const {
    std::vector<double> out(n);
    for (int j = 0; j < n; ++j) {
      double s = 0.0;
      for (int t = 0; t < d; ++t) s += q[h][t] * k[j][t];
      out[j] = s / std::sqrt(static_cast<double>(d));
    }
    return out;
  }
  std::vector<int> all() const {
    std::vector<int> a(n);
    for (int j = 0; j < n; ++j) a[j] = j;
    return a;
  }
};

// Runs the policy on one decode step whose attention rows are softmax(q k^T / sqrt(d)) and returns the edit.
cache::HeadEdit evict_once(const std::string& spec, const Explicit& x, int budget) {
  auto inst = make_policy(spec);
  policy::RunInfo info;
  info.config.n_layers = 1;
  info.config.n_heads = x.heads;
  info.config.n_kv_heads = 1;
  info.config.head_dim = x.d;
  info.prompt_length = x.n - 1;
  info.budget = budget;
  inst.policy->begin(info);
  cache::KVCache cache(1, 1, x.d);
  for (int j = 0; j < x.n; ++j) {
    std::vector<float> kf(x.k[j].begin(), x.k[j].end()), vf(x.v[j].begin(), x.v[j].end());
    int32_t pos = j;
    cache.append(0, kf.data(), vf.data(), 1, &pos);
  }
  observation::AttentionObservation obs;
  obs.layer = 0;
  obs.phase = observation::Phase::Decode;
  obs.n_heads = x.heads;
  obs.n_kv_heads = 1;
  obs.query_positions = {x.n - 1};
  obs.n_keys = {x.n};
  obs.window = 1;
  for (int h = 0; h < x.heads; ++h) {
    const std::vector<double> p = softmax_over(x.logits(h), x.all());
    std::vector<float> row(p.begin(), p.end());
    obs.last_row.push_back(row);
    obs.column_sums.push_back(row);
    obs.window_rows.push_back(row);
  }
  cache::CacheEdit edit = inst.policy->after_layer(obs, cache);
  REQUIRE(edit.heads.size() == 1);
  return edit.heads[0];
}

}  // namespace

TEST_CASE("CAOTE's score is the change in attention output when the entry is really removed", "[policy][caote]") {
  const Explicit x;
  const cache::HeadEdit edit = evict_once("caote:base=tova", x, x.n - 1);
  REQUIRE(edit.scores.size() == static_cast<std::size_t>(x.n));
  // Brute force: per query head, the output with every key and with key j removed (softmax re-run over
  // the others); the three heads share the KV head, so the error is that of their concatenated outputs.
  std::vector<double> brute(x.n, 0.0);
  for (int h = 0; h < x.heads; ++h) {
    const std::vector<double> full = output(softmax_over(x.logits(h), x.all()), x.v);
    for (int j = 0; j < x.n; ++j) {
      std::vector<int> rest;
      for (int i = 0; i < x.n; ++i)
        if (i != j) rest.push_back(i);
      const double e = distance(full, output(softmax_over(x.logits(h), rest), x.v));
      brute[j] += e * e;
    }
  }
  int least = 0;
  for (int j = 0; j < x.n; ++j) {
    INFO("entry " << j);
    REQUIRE(edit.scores[j] == Approx(std::sqrt(brute[j])).epsilon(1e-5));
    if (brute[j] < brute[least]) least = j;
  }
  // One over budget: exactly the entry with the smallest output change goes.
  std::vector<int32_t> want;
  for (int j = 0; j < x.n; ++j)
    if (j != least) want.push_back(j);
  REQUIRE(edit.keep == want);
  // The base score rides along: TOVA's last-row attention, averaged over the group.
  for (int j = 0; j < x.n; ++j) {
    double mean = 0.0;
    for (int h = 0; h < x.heads; ++h) mean += softmax_over(x.logits(h), x.all())[j] / x.heads;
    REQUIRE(edit.secondary_scores[j] == Approx(mean).epsilon(1e-5));
  }
}

TEST_CASE("CAOTE with one query head per KV head is Eq. 8 exactly", "[policy][caote]") {
  Explicit x;
  x.heads = 1;
  const cache::HeadEdit edit = evict_once("caote:base=tova", x, x.n - 1);
  const std::vector<double> full = output(softmax_over(x.logits(0), x.all()), x.v);
  for (int j = 0; j < x.n; ++j) {
    std::vector<int> rest;
    for (int i = 0; i < x.n; ++i)
      if (i != j) rest.push_back(i);
    REQUIRE(edit.scores[j] == Approx(distance(full, output(softmax_over(x.logits(0), rest), x.v))).epsilon(1e-5));
  }
}

TEST_CASE("CAOTE's mean_attn GQA option applies the single-head error to the group's mean row", "[policy][caote]") {
  const Explicit x;
  const cache::HeadEdit edit = evict_once("caote:base=tova,gqa=mean_attn", x, x.n - 1);
  std::vector<double> mean(x.n, 0.0);
  for (int h = 0; h < x.heads; ++h) {
    const auto p = softmax_over(x.logits(h), x.all());
    for (int j = 0; j < x.n; ++j) mean[j] += p[j] / x.heads;
  }
  const std::vector<double> full = output(mean, x.v);
  for (int j = 0; j < x.n; ++j) {
    // Removing j and renormalising the mean distribution over the rest.
    std::vector<double> rest = mean;
    rest[j] = 0.0;
    for (double& p : rest) p /= 1.0 - mean[j];
    REQUIRE(edit.scores[j] == Approx(distance(full, output(rest, x.v))).epsilon(1e-5));
  }
}

TEST_CASE("FastCAOTE replaces the output by the mean value (Eq. 23)", "[policy][caote]") {
  const Explicit x;
  const cache::HeadEdit edit = evict_once("caote:base=tova,variant=fast", x, x.n - 1);
  std::vector<double> mean_v(x.d, 0.0);
  for (int j = 0; j < x.n; ++j)
    for (int t = 0; t < x.d; ++t) mean_v[t] += x.v[j][t] / x.n;
  for (int j = 0; j < x.n; ++j) {
    double sq = 0.0;
    for (int h = 0; h < x.heads; ++h) {
      const double a = softmax_over(x.logits(h), x.all())[j];
      const double c = a / (1.0 - a) * distance(mean_v, x.v[j]);
      sq += c * c;
    }
    REQUIRE(edit.scores[j] == Approx(std::sqrt(sq)).epsilon(1e-5));
  }
}

TEST_CASE("CAOTE over H2O normalises accumulated scores that sum past 1 (Eq. 22)", "[policy][caote]") {
  // A prefill block: column sums over several queries sum to the number of queries, not 1.
  const Explicit x;
  auto inst = make_policy("caote:base=h2o,recent_ratio=0");
  policy::RunInfo info;
  info.config.n_layers = 1;
  info.config.n_heads = 1;
  info.config.n_kv_heads = 1;
  info.config.head_dim = x.d;
  info.prompt_length = x.n;
  info.budget = x.n - 2;
  inst.policy->begin(info);
  cache::KVCache cache(1, 1, x.d);
  for (int j = 0; j < x.n; ++j) {
    std::vector<float> kf(x.k[j].begin(), x.k[j].end()), vf(x.v[j].begin(), x.v[j].end());
    int32_t pos = j;
    cache.append(0, kf.data(), vf.data(), 1, &pos);
  }
  const std::vector<float> sums = {2.5f, 0.4f, 1.1f, 0.3f, 0.9f, 0.8f};  // six queries' column sums
  observation::AttentionObservation obs;
  obs.layer = 0;
  obs.phase = observation::Phase::Prefill;
  obs.n_heads = 1;
  obs.n_kv_heads = 1;
  obs.query_positions = {0, 1, 2, 3, 4, 5};
  obs.n_keys = {x.n};
  obs.column_sums = {sums};
  const cache::CacheEdit edit = inst.policy->after_layer(obs, cache);
  REQUIRE(edit.heads.size() == 1);
  double total = 0.0;
  for (float s : sums) total += s;
  std::vector<double> alpha(x.n);
  for (int j = 0; j < x.n; ++j) alpha[j] = sums[j] / total;
  const std::vector<double> full = output(alpha, x.v);
  std::vector<std::pair<int, double>> scored;
  for (int j = 0; j < x.n; ++j) {
    std::vector<double> rest = alpha;
    rest[j] = 0.0;
    for (double& p : rest) p /= 1.0 - alpha[j];
    const double e = distance(full, output(rest, x.v));
    REQUIRE(edit.heads[0].scores[j] == Approx(e).epsilon(1e-5));
    scored.push_back({j, e});
  }
  const std::vector<int> want = sorted(top_k_by_hand(scored, x.n - 2));
  REQUIRE(std::vector<int>(edit.heads[0].keep.begin(), edit.heads[0].keep.end()) == want);
}

namespace {

// Forwards to a policy and remembers, for each after_layer call, the cache entries it saw.
class Spy final : public policy::Policy {
 public:
  explicit Spy(policy::Policy& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  observation::ObservationRequest request(int l, observation::Phase p) const override { return inner_.request(l, p); }
  int prefill_block_size() const override { return inner_.prefill_block_size(); }
  void begin(const policy::RunInfo& info) override { inner_.begin(info); }
  cache::CacheEdit after_layer(const observation::AttentionObservation& obs, cache::KVCache& cache) override {
    cache::CacheEdit edit = inner_.after_layer(obs, cache);
    if (on_layer) on_layer(obs, cache, edit);
    return edit;
  }
  cache::CacheEdit after_step(const observation::StepInfo& s, cache::KVCache& c) override { return inner_.after_step(s, c); }
  int expected_length(int l, int g, const observation::StepInfo& s) const override {
    return inner_.expected_length(l, g, s);
  }
  std::vector<int> layer_budgets() const override { return inner_.layer_budgets(); }
  std::function<void(const observation::AttentionObservation&, const cache::KVCache&, const cache::CacheEdit&)> on_layer;

 private:
  policy::Policy& inner_;
};

}  // namespace

TEST_CASE("block-wise prefill and decode evict down to the budget by CAOTE every step", "[policy][caote]") {
  const Shape shape{2, 9, 3, 4};
  const int prompt = 30, block = 8, budget = 12, decode = 6;
  // H2O keeps its recent half of the budget (recent_ratio 0.5) as H2O does; CAOTE ranks the rest.
  for (const auto& [base, recent] :
       std::vector<std::pair<std::string, int>>{{"tova", 0}, {"h2o", 6}, {"h2o,recent_ratio=0", 0}}) {
    AttentionTable table(shape, 64, 7);
    auto inst = make_policy("caote:block=" + std::to_string(block) + ",base=" + base);
    Spy spy(*inst.policy);
    // H2O's accumulated score by position, per (layer, query head), rebuilt from the table.
    std::map<std::tuple<int, int, int>, double> acc;
    int evictions = 0;
    spy.on_layer = [&](const observation::AttentionObservation& obs, const cache::KVCache& cache,
                       const cache::CacheEdit& edit) {
      const int l = obs.layer;
      for (int g = 0; g < shape.kv_heads; ++g) {
        auto pos = cache.positions(l, g);
        const std::vector<int> keys(pos.begin(), pos.end());
        const int n = static_cast<int>(keys.size());
        std::vector<double> sq(n, 0.0);
        for (int k = 0; k < shape.group(); ++k) {
          const int h = g * shape.group() + k;
          std::vector<double> score(n, 0.0);
          if (base.rfind("tova", 0) == 0) {
            score = table.row(l, h, obs.query_positions.back(), keys);
          } else {
            for (int q : obs.query_positions) {
              const auto p = table.row(l, h, q, keys);
              for (int j = 0; j < n; ++j) acc[{l, h, keys[j]}] += p[j];
            }
            for (int j = 0; j < n; ++j) score[j] = acc[{l, h, keys[j]}];
          }
          double total = 0.0;
          for (double s : score) total += s;
          std::vector<double> x(shape.head_dim, 0.0);
          for (int j = 0; j < n; ++j)
            for (int t = 0; t < shape.head_dim; ++t) x[t] += score[j] / total * cache.value(l, g, j)[t];
          for (int j = 0; j < n; ++j) {
            const double a = score[j] / total;
            double d2 = 0.0;
            for (int t = 0; t < shape.head_dim; ++t)
              d2 += (x[t] - cache.value(l, g, j)[t]) * (x[t] - cache.value(l, g, j)[t]);
            sq[j] += a * a / ((1 - a) * (1 - a)) * d2;
          }
        }
        const cache::HeadEdit* head = nullptr;
        for (const auto& e : edit.heads)
          if (e.layer == l && e.kv_head == g) head = &e;
        if (n <= budget) {
          REQUIRE(head == nullptr);
          continue;
        }
        REQUIRE(head != nullptr);
        ++evictions;
        std::vector<std::pair<int, double>> scored;
        for (int j = 0; j < n - recent; ++j) scored.push_back({j, std::sqrt(sq[j])});
        std::vector<int> want = top_k_by_hand(scored, budget - recent);
        for (int j = n - recent; j < n; ++j) want.push_back(j);
        want = sorted(want);
        INFO(base << " layer " << l << " kv head " << g << " step " << obs.step);
        REQUIRE(std::vector<int>(head->keep.begin(), head->keep.end()) == want);
        if (obs.phase == observation::Phase::Decode) REQUIRE(n == budget + 1);  // one eviction per decode step
      }
    };
    PolicyDriver d(table, spy, prompt, budget, decode);  // checks size == min(seq_len, budget) every step
    d.run(decode);
    // Blocks 2-4 (the first overflows at 16 > 12) and every decode step, for each layer and KV head.
    REQUIRE(evictions == (3 + decode) * shape.layers * shape.kv_heads);
    const policy::Series* events = inst.policy->diagnostics().find("caote_evictions");
    REQUIRE(events != nullptr);
    REQUIRE(events->shape[0] == evictions);
  }
}

TEST_CASE("CAOTE over SnapKV protects the observation window and keeps the budget", "[policy][caote]") {
  const Shape shape{2, 9, 3, 4};
  AttentionTable table(shape, 64, 3);
  auto inst = make_policy("caote:base=snapkv,window=4,block=8");
  PolicyDriver d(table, *inst.policy, 30, 12, 5);
  d.run(5, [&](const observation::StepInfo& step) {
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.kv_heads; ++g) {
        const std::vector<int> kept = d.kept(l, g);
        for (int p = step.seq_len - 4; p < step.seq_len; ++p)
          REQUIRE(std::find(kept.begin(), kept.end(), p) != kept.end());
      }
  });
}

TEST_CASE("CAOTE with a budget of the whole sequence keeps everything", "[policy][caote]") {
  const Shape shape{2, 9, 3, 4};
  AttentionTable table(shape, 64, 5);
  for (const std::string base : {"h2o", "tova", "snapkv"}) {
    auto inst = make_policy("caote:base=" + base);
    PolicyDriver d(table, *inst.policy, 20, 30, 6);
    d.run(6);
    REQUIRE(d.edits() == 0);
    for (int l = 0; l < shape.layers; ++l)
      for (int g = 0; g < shape.kv_heads; ++g) REQUIRE(d.kept(l, g).size() == 26u);
  }
}
