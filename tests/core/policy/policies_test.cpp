// The five score-based baselines against plain reference computations over an explicit attention table:
// each reference re-derives the kept set step by step with nested loops, never through the production
// helpers (keep_top_scores, pool1d, reduce_group, the allocations).
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <numeric>

#include "core/policy/allocation.h"
#include "core/policy/registry.h"
#include "tests/core/policy/policy_harness.h"

using namespace kvscope;
using namespace kvscope::test;
using policy::make_policy;

namespace {

const Shape kGqa{2, 9, 3, 4};  // SmolLM2's grouping: 3 query heads per KV head
const Shape kMha{2, 3, 3, 4};  // one query head per KV head

std::vector<int> range(int begin, int end) {
  std::vector<int> v;
  for (int i = begin; i < end; ++i) v.push_back(i);
  return v;
}

// Positions per (layer, kv head) as the references see them.
struct RefCache {
  explicit RefCache(const Shape& s) : shape(s), keys(static_cast<std::size_t>(s.layers) * s.kv_heads) {}
  std::vector<int>& at(int l, int g) { return keys[static_cast<std::size_t>(l) * shape.kv_heads + g]; }
  Shape shape;
  std::vector<std::vector<int>> keys;
};

void check_all(PolicyDriver& d, RefCache& ref, const observation::StepInfo& step) {
  for (int l = 0; l < ref.shape.layers; ++l)
    for (int g = 0; g < ref.shape.kv_heads; ++g) {
      INFO("layer " << l << " kv head " << g << (step.phase == Phase::Prefill ? " prefill " : " decode ") << step.step);
      REQUIRE(d.kept(l, g) == ref.at(l, g));
    }
}

}  // namespace

TEST_CASE("streaming_llm keeps the sinks and the most recent tokens", "[policy][streaming_llm]") {
  for (const Shape& shape : {kGqa, kMha})
    for (int sinks : {4, 2}) {
      AttentionTable table(shape, 64, 1);
      auto inst = make_policy("streaming_llm:sinks=" + std::to_string(sinks));
      const int prompt = 20, budget = 10, decode = 6;
      PolicyDriver d(table, *inst.policy, prompt, budget, decode);
      d.run(decode, [&](const observation::StepInfo& step) {
        const int n = step.seq_len;
        std::vector<int> want = range(0, sinks);
        for (int p = n - (budget - sinks); p < n; ++p) want.push_back(p);
        for (int l = 0; l < shape.layers; ++l)
          for (int g = 0; g < shape.kv_heads; ++g) REQUIRE(d.kept(l, g) == want);
      });
    }
}

namespace {

// H2O by hand: every query's probabilities add to its keys' running sums (all query heads of the group);
// over budget, the floor(ratio * budget) newest stay and the rest of the budget goes to the largest sums.
struct H2oReference {
  const AttentionTable& table;
  int budget;
  double recent_ratio;
  RefCache ref;
  std::vector<std::map<int, double>> acc;
  int seq_len = 0;

  H2oReference(const AttentionTable& t, int b, double r)
      : table(t), budget(b), recent_ratio(r), ref(t.shape()), acc(ref.keys.size()) {}

  void advance(int new_seq_len) {
    const Shape& s = table.shape();
    for (int l = 0; l < s.layers; ++l)
      for (int g = 0; g < s.kv_heads; ++g) {
        std::vector<int>& keys = ref.at(l, g);
        auto& sums = acc[static_cast<std::size_t>(l) * s.kv_heads + g];
        for (int p = seq_len; p < new_seq_len; ++p) keys.push_back(p);
        for (int q = seq_len; q < new_seq_len; ++q)
          for (int h = g * s.group(); h < (g + 1) * s.group(); ++h) {
            const std::vector<double> row = table.row(l, h, q, keys);
            for (std::size_t j = 0; j < keys.size(); ++j) sums[keys[j]] += row[j];
          }
        if (static_cast<int>(keys.size()) <= budget) continue;
        const int recent = static_cast<int>(std::floor(recent_ratio * budget));
        std::vector<std::pair<int, double>> candidates;
        for (std::size_t j = 0; j + recent < keys.size(); ++j) candidates.push_back({keys[j], sums[keys[j]]});
        std::vector<int> kept = top_k_by_hand(candidates, budget - recent);
        for (std::size_t j = keys.size() - recent; j < keys.size(); ++j) kept.push_back(keys[j]);
        keys = sorted(kept);
      }
    seq_len = new_seq_len;
  }
};

}  // namespace

TEST_CASE("h2o keeps heavy hitters by accumulated attention plus recent tokens", "[policy][h2o]") {
  struct Case {
    Shape shape;
    std::string spec;
    double ratio;
    int prompt, budget, decode;
  };
  const std::vector<Case> cases = {
      {kGqa, "h2o", 0.5, 24, 10, 8},
      {kMha, "h2o", 0.5, 24, 10, 8},
      {kGqa, "h2o:block=8", 0.5, 24, 10, 6},  // evicts after each prompt block
      {kMha, "h2o:block=5,recent_ratio=0.3", 0.3, 23, 9, 6},
      {kGqa, "h2o:recent_ratio=0", 0.0, 16, 7, 4},
  };
  for (const Case& c : cases) {
    INFO(c.spec << " heads " << c.shape.heads);
    AttentionTable table(c.shape, 64, 2);
    auto inst = make_policy(c.spec);
    H2oReference ref(table, c.budget, c.ratio);
    PolicyDriver d(table, *inst.policy, c.prompt, c.budget, c.decode);
    d.run(c.decode, [&](const observation::StepInfo& step) {
      ref.advance(step.seq_len);
      check_all(d, ref.ref, step);
      for (int l = 0; l < c.shape.layers; ++l)
        for (int g = 0; g < c.shape.kv_heads; ++g) REQUIRE(d.cache().size(l, g) == std::min(c.budget, step.seq_len));
    });
    // The running sums live in the cache's per-entry scores.
    for (int l = 0; l < c.shape.layers; ++l)
      for (int g = 0; g < c.shape.kv_heads; ++g) {
        const auto scores = d.cache().scores(l, g);
        const auto kept = d.kept(l, g);
        for (std::size_t j = 0; j < kept.size(); ++j)
          CHECK(scores[j] ==
                Approx(ref.acc[static_cast<std::size_t>(l) * c.shape.kv_heads + g][kept[j]]).epsilon(1e-4));
      }
  }
}

namespace {

// TOVA by hand: the last query of each step scores the keys (mean over the query heads that read the KV
// head, or over all heads of the layer); over budget, the highest scores stay.
struct TovaReference {
  const AttentionTable& table;
  int budget;
  bool layer_shared;
  RefCache ref;
  std::vector<std::vector<double>> last_scores;
  int seq_len = 0;

  TovaReference(const AttentionTable& t, int b, bool shared)
      : table(t), budget(b), layer_shared(shared), ref(t.shape()), last_scores(ref.keys.size()) {}

  void advance(int new_seq_len) {
    const Shape& s = table.shape();
    const int q = new_seq_len - 1;
    for (int l = 0; l < s.layers; ++l)
      for (int g = 0; g < s.kv_heads; ++g) {
        std::vector<int>& keys = ref.at(l, g);
        for (int p = seq_len; p < new_seq_len; ++p) keys.push_back(p);
        const int first = layer_shared ? 0 : g * s.group();
        const int count = layer_shared ? s.heads : s.group();
        std::vector<double> score(keys.size(), 0.0);
        for (int h = first; h < first + count; ++h) {
          const std::vector<double> row = table.row(l, h, q, keys);
          for (std::size_t j = 0; j < keys.size(); ++j) score[j] += row[j] / count;
        }
        last_scores[static_cast<std::size_t>(l) * s.kv_heads + g] = score;
        if (static_cast<int>(keys.size()) <= budget) continue;
        std::vector<std::pair<int, double>> candidates;
        for (std::size_t j = 0; j < keys.size(); ++j) candidates.push_back({keys[j], score[j]});
        keys = sorted(top_k_by_hand(candidates, budget));
      }
    seq_len = new_seq_len;
  }
};

}  // namespace

TEST_CASE("tova keeps the entries the last query attends to most", "[policy][tova]") {
  for (const Shape& shape : {kGqa, kMha})
    for (bool shared : {false, true}) {
      INFO("heads " << shape.heads << (shared ? " layer-shared" : " per kv head"));
      AttentionTable table(shape, 64, 3);
      auto inst = make_policy(shared ? "tova:heads=layer" : "tova");
      const int prompt = 20, budget = 8, decode = 7;
      TovaReference ref(table, budget, shared);
      PolicyDriver d(table, *inst.policy, prompt, budget, decode);
      int evictions = 0;
      d.run(decode, [&](const observation::StepInfo& step) {
        const int before = evictions;
        evictions = d.edits();
        ref.advance(step.seq_len);
        check_all(d, ref.ref, step);
        // One eviction per step: after the prompt, every step is one edit (all heads).
        CHECK(evictions == before + 1);
      });
      // The last edit carries the scores it ranked by: the last query's row averaged over the heads.
      const cache::CacheEdit& edit = d.last_edit();
      REQUIRE(static_cast<int>(edit.heads.size()) == shape.layers * shape.kv_heads);
      for (const auto& head : edit.heads) {
        const auto& want = ref.last_scores[static_cast<std::size_t>(head.layer) * shape.kv_heads + head.kv_head];
        REQUIRE(head.scores.size() == want.size());
        REQUIRE(head.scores.size() == static_cast<std::size_t>(budget + 1));
        for (std::size_t j = 0; j < want.size(); ++j) CHECK(head.scores[j] == Approx(want[j]).epsilon(1e-5));
      }
      if (shared)
        for (int l = 0; l < shape.layers; ++l)
          for (int g = 1; g < shape.kv_heads; ++g) CHECK(d.kept(l, g) == d.kept(l, 0));
    }
}

namespace {

// SnapKV by hand for one layer and KV head: window sums of the last w prompt queries (mean over the
// group), pooled over the prefix with zero padding, top (budget - w) of the prefix plus the window.
std::vector<int> snapkv_by_hand(const AttentionTable& table, int layer, int g, int prompt, int budget, int window,
                                int kernel, bool max_pool) {
  const Shape& s = table.shape();
  const std::vector<int> keys = range(0, prompt);
  if (prompt <= budget) return keys;
  std::vector<double> sums(prompt, 0.0);
  for (int h = g * s.group(); h < (g + 1) * s.group(); ++h)
    for (int q = prompt - window; q < prompt; ++q) {
      const std::vector<double> row = table.row(layer, h, q, keys);
      for (int j = 0; j < prompt; ++j) sums[j] += row[j] / s.group();
    }
  const int prefix = prompt - window;
  std::vector<std::pair<int, double>> pooled;
  for (int i = 0; i < prefix; ++i) {
    double acc = max_pool ? -1.0 : 0.0;
    for (int j = i - kernel / 2; j <= i + kernel / 2; ++j) {
      if (j < 0 || j >= prefix) continue;  // zero padding
      acc = max_pool ? std::max(acc, sums[j]) : acc + sums[j];
    }
    pooled.push_back({i, max_pool ? acc : acc / kernel});
  }
  std::vector<int> kept = top_k_by_hand(pooled, budget - window);
  for (int p = prefix; p < prompt; ++p) kept.push_back(p);
  return sorted(kept);
}

}  // namespace

TEST_CASE("snapkv keeps the observation window and the top pooled window scores", "[policy][snapkv]") {
  struct Case {
    Shape shape;
    std::string spec;
    int window, kernel;
    bool max_pool;
    int prompt, budget;
  };
  const std::vector<Case> cases = {
      {kGqa, "snapkv:window=8,kernel=5", 8, 5, false, 40, 16},
      {kMha, "snapkv:window=8,kernel=5", 8, 5, false, 40, 16},
      {kGqa, "snapkv:window=6,kernel=3,pooling=max", 6, 3, true, 33, 12},
      {kGqa, "snapkv", 32, 7, false, 38, 34},  // the paper's defaults: w = 32, kernel 7, avg
      {kMha, "snapkv:window=4,pooling=none", 4, 1, false, 25, 9},
  };
  for (const Case& c : cases) {
    INFO(c.spec << " heads " << c.shape.heads);
    AttentionTable table(c.shape, 64, 4);
    auto inst = make_policy(c.spec);
    const int decode = 5;
    PolicyDriver d(table, *inst.policy, c.prompt, c.budget, decode);
    d.run(decode, [&](const observation::StepInfo& step) {
      const int generated = step.phase == Phase::Decode ? step.step + 1 : 0;
      for (int l = 0; l < c.shape.layers; ++l)
        for (int g = 0; g < c.shape.kv_heads; ++g) {
          // Decode tokens are appended behind the compressed prompt, never evicted.
          std::vector<int> want = snapkv_by_hand(table, l, g, c.prompt, c.budget, c.window, c.kernel, c.max_pool);
          for (int p = c.prompt; p < c.prompt + generated; ++p) want.push_back(p);
          REQUIRE(d.kept(l, g) == want);
          REQUIRE(d.cache().size(l, g) == c.budget + generated);
        }
    });
    CHECK(d.edits() == 1);
  }
}

TEST_CASE("pyramidkv is snapkv under PyramidKV's budgets", "[policy][pyramidkv]") {
  const Shape shape{4, 9, 3, 4};
  AttentionTable table(shape, 64, 5);
  auto inst = make_policy("pyramidkv:window=4,kernel=5");
  // avg 20, window 4, prompt 40, 4 layers: 4 + {31.2, 21.07, 10.93, 0.8} rounded by largest remainder
  // (worked out in allocation_test.cpp).
  const std::vector<int> budgets = {35, 25, 15, 5};
  PolicyDriver d(table, *inst.policy, 40, 20, 3);
  d.run(3);
  for (int l = 0; l < shape.layers; ++l)
    for (int g = 0; g < shape.kv_heads; ++g) {
      std::vector<int> want = snapkv_by_hand(table, l, g, 40, budgets[l], 4, 5, false);
      for (int p = 40; p < 43; ++p) want.push_back(p);
      REQUIRE(d.kept(l, g) == want);
    }
  CHECK(inst.policy->layer_budgets() == budgets);
  const auto* series = inst.policy->diagnostics().find("layer_budgets");
  REQUIRE(series != nullptr);
  CHECK(series->values == std::vector<double>{35, 25, 15, 5});
  CHECK(series->shape == std::vector<int>{4});
}

TEST_CASE("snapkv with allocation=pyramid equals pyramidkv", "[policy][pyramidkv]") {
  const Shape shape{3, 3, 1, 4};
  AttentionTable table(shape, 64, 6);
  auto a = make_policy("snapkv:window=4,allocation=pyramid,beta=5");
  auto b = make_policy("pyramidkv:window=4,beta=5");
  PolicyDriver da(table, *a.policy, 30, 12, 2), db(table, *b.policy, 30, 12, 2);
  da.run(2);
  db.run(2);
  CHECK(a.policy->layer_budgets() == b.policy->layer_budgets());
  CHECK(a.policy->layer_budgets() != std::vector<int>{12, 12, 12});
  for (int l = 0; l < shape.layers; ++l) CHECK(da.kept(l, 0) == db.kept(l, 0));
}

TEST_CASE("a budget that holds the whole run keeps everything", "[policy]") {
  for (const std::string spec :
       {"streaming_llm", "h2o", "h2o:block=4", "tova", "snapkv:window=4", "pyramidkv:window=4"})
    for (const Shape& shape : {kGqa, kMha}) {
      INFO(spec << " heads " << shape.heads);
      AttentionTable table(shape, 64, 7);
      auto inst = make_policy(spec);
      const int prompt = 12, decode = 6;
      PolicyDriver d(table, *inst.policy, prompt, 30, decode);
      d.run(decode, [&](const observation::StepInfo& step) {
        for (int l = 0; l < shape.layers; ++l)
          for (int g = 0; g < shape.kv_heads; ++g) REQUIRE(d.kept(l, g) == range(0, step.seq_len));
      });
      CHECK(d.edits() == 0);
      CHECK(inst.policy->layer_budgets() == std::vector<int>(shape.layers, 30));
    }
}

TEST_CASE("a budget equal to the prompt starts evicting at the first decode step", "[policy]") {
  for (const std::string spec : {"streaming_llm", "h2o", "tova", "snapkv:window=4", "pyramidkv:window=4"}) {
    INFO(spec);
    AttentionTable table(kGqa, 64, 8);
    auto inst = make_policy(spec);
    const bool once = spec.rfind("snapkv", 0) == 0 || spec.rfind("pyramidkv", 0) == 0;
    PolicyDriver d(table, *inst.policy, 12, 12, 5);
    d.run(5, [&](const observation::StepInfo& step) {
      const int want = once ? step.seq_len : std::min(12, step.seq_len);
      for (int l = 0; l < kGqa.layers; ++l)
        for (int g = 0; g < kGqa.kv_heads; ++g) REQUIRE(d.cache().size(l, g) == want);
    });
  }
}

TEST_CASE("a policy can run twice", "[policy]") {
  AttentionTable table(kGqa, 64, 9);
  auto inst = make_policy("h2o");
  std::vector<int> first;
  for (int run = 0; run < 2; ++run) {
    PolicyDriver d(table, *inst.policy, 20, 8, 3);
    d.run(3);
    if (run == 0)
      first = d.kept(1, 2);
    else
      CHECK(d.kept(1, 2) == first);
  }
}

TEST_CASE("every scored policy runs under every allocation", "[policy][allocation]") {
  const Shape shape{4, 9, 3, 4};
  AttentionTable table(shape, 64, 10);
  for (const std::string name : {"streaming_llm", "h2o", "tova", "snapkv:window=4", "pyramidkv:window=4"})
    for (const auto& allocation : policy::allocation_names()) {
      INFO(name << " allocation " << allocation);
      // per_layer states each layer's ratio itself: kvpress's int(40 (1 - r)), 0.8 -> 7.999999999999998 -> 7
      const bool per_layer = allocation == "per_layer";
      auto inst = make_policy(name + (name.find(':') == std::string::npos ? ":" : ",") + "allocation=" + allocation +
                              (per_layer ? ",layer_ratios=0.5/0.25/0.75/0.8" : ""));
      PolicyDriver d(table, *inst.policy, 40, 12, 3);
      d.run(3);  // the driver checks every length against expected_length
      const auto budgets = inst.policy->layer_budgets();
      REQUIRE(budgets.size() == 4u);
      if (per_layer)
        CHECK(budgets == std::vector<int>{20, 30, 10, 7});
      else
        CHECK(std::accumulate(budgets.begin(), budgets.end(), 0) == 4 * 12);
    }
}
