// Decode-time eviction (CAKE §5's protocol) for the two policies whose papers append decode tokens:
// DynamicKV and KVMerger. A prompt that fits the budget leaves the prefill alone, so each decode step's
// victim can be written out by hand from the attention table: a direct loop over the probabilities the
// queries gave the entries present at the time.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>

#include "core/policy/registry.h"
#include "tests/core/policy/policy_harness.h"

using namespace kvscope;
using namespace kvscope::test;
using policy::make_policy;

namespace {

const Shape kShape{2, 6, 2, 4};  // 2 layers, 6 query heads, 2 KV heads (groups of 3)

// Mean over a KV head's query heads of query q's probabilities over `present` keys.
std::vector<double> group_row(const AttentionTable& table, int layer, int kv_head, int q,
                              const std::vector<int>& present) {
  const int group = kShape.group();
  std::vector<double> out(present.size(), 0.0);
  for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
    const std::vector<double> p = table.row(layer, h, q, present);
    for (std::size_t j = 0; j < p.size(); ++j) out[j] += p[j] / group;
  }
  return out;
}

// The entry to evict: the lowest score among entries [0, n - protect), the earlier on a tie.
int lowest(const std::vector<double>& score, int protect) {
  int victim = 0;
  for (int j = 1; j < static_cast<int>(score.size()) - protect; ++j)
    if (score[j] < score[victim]) victim = j;
  return victim;
}

// Runs `d` and hands every (layer, KV head) to `check` after every step.
void check_every_head(PolicyDriver& d, int decode,
                      const std::function<void(const observation::StepInfo&, int layer, int kv_head)>& check) {
  d.run(decode, [&](const observation::StepInfo& step) {
    for (int l = 0; l < kShape.layers; ++l)
      for (int g = 0; g < kShape.kv_heads; ++g) check(step, l, g);
  });
}

}  // namespace

TEST_CASE("dynamickv:decode_evict evicts by the new query's pooled attention, keeping the window",
          "[policy][dynamickv][protocol]") {
  const int prompt = 8, budget = 12, window = 3, kernel = 3, decode = 9;
  AttentionTable table(kShape, 32, 31);
  auto inst = make_policy("dynamickv:decode_evict=true,window=3,kernel=3,pooling=avg");
  PolicyDriver d(table, *inst.policy, prompt, budget, decode);
  // The reference cache: positions per (layer, KV head).
  std::vector<std::vector<int>> present(kShape.layers * kShape.kv_heads);
  for (auto& p : present)
    for (int j = 0; j < prompt; ++j) p.push_back(j);
  int evictions = 0;
  check_every_head(d, decode, [&](const observation::StepInfo& step, int l, int g) {
    if (step.phase == observation::Phase::Prefill) return;
    const int q = step.seq_len - 1;
    std::vector<int>& keys = present[l * kShape.kv_heads + g];
    keys.push_back(q);
    if (static_cast<int>(keys.size()) > budget) {
      // Eq. 1 with the step's one query as the window: its row over every entry but the newest, avg-pooled
      // with zero padding counted; then the last `window` entries stay and the lowest of the rest leaves.
      const std::vector<double> row = group_row(table, l, g, q, keys);
      const int scored = static_cast<int>(keys.size()) - 1;
      std::vector<double> pooled(keys.size(), std::numeric_limits<double>::infinity());
      for (int j = 0; j < scored; ++j) {
        double sum = 0.0;
        for (int t = j - kernel / 2; t <= j + kernel / 2; ++t)
          if (t >= 0 && t < scored) sum += row[t];
        pooled[j] = sum / kernel;
      }
      keys.erase(keys.begin() + lowest(pooled, window));
      ++evictions;
    }
    REQUIRE(d.kept(l, g) == keys);
  });
  CHECK(evictions == (prompt + decode - budget) * kShape.layers * kShape.kv_heads);
  // Without the switch decode tokens append, as the paper does.
  auto appending = make_policy("dynamickv:window=3");
  PolicyDriver a(table, *appending.policy, prompt, budget, decode);
  a.run(decode);
  CHECK(a.kept(0, 0).size() == static_cast<std::size_t>(prompt + decode));
}

TEST_CASE("kvmerger:decode_evict evicts the least accumulated attention outside the newest entry",
          "[policy][kvmerger][protocol]") {
  // theta = 1 is out of reach (cosines are clamped to 1 and must exceed theta), so every victim is evicted.
  const int prompt = 8, budget = 11, decode = 9;
  AttentionTable table(kShape, 32, 32);
  auto inst = make_policy("kvmerger:decode_evict=true,theta=1");
  PolicyDriver d(table, *inst.policy, prompt, budget, decode);
  std::vector<std::vector<int>> present(kShape.layers * kShape.kv_heads);
  std::vector<std::vector<double>> acc(present.size());  // Eq. 6: summed group-mean attention, per present entry
  std::vector<int> appended(present.size(), 0);
  check_every_head(d, decode, [&](const observation::StepInfo& step, int l, int g) {
    const std::size_t i = l * kShape.kv_heads + g;
    for (; appended[i] < step.seq_len; ++appended[i]) {
      present[i].push_back(appended[i]);
      acc[i].push_back(0.0);
    }
    // Every query of the step attends over what is present once the step's keys are in.
    const int from = step.phase == observation::Phase::Prefill ? 0 : step.seq_len - 1;
    for (int q = from; q < step.seq_len; ++q) {
      const std::vector<double> row = group_row(table, l, g, q, present[i]);
      for (std::size_t j = 0; j < row.size(); ++j) acc[i][j] += row[j];
    }
    if (static_cast<int>(present[i].size()) > budget) {
      const int victim = lowest(acc[i], 1);
      present[i].erase(present[i].begin() + victim);
      acc[i].erase(acc[i].begin() + victim);
    }
    REQUIRE(d.kept(l, g) == present[i]);
  });
  CHECK(inst.policy->diagnostics().settings().at("decode_evictions") ==
        std::to_string((prompt + decode - budget) * kShape.layers * kShape.kv_heads));
  CHECK(inst.policy->diagnostics().settings().at("decode_merges") == "0");
}

TEST_CASE("kvmerger:decode_evict merges a victim into a similar neighbour with Algorithm 2's pair weights",
          "[policy][kvmerger][protocol]") {
  // theta = -1: every victim has a neighbour above the threshold, so each decode eviction is a merge and the
  // cache keeps one entry fewer than it would grow, at exactly the budget, with merge counts adding up.
  const int prompt = 8, budget = 10, decode = 6;
  AttentionTable table(kShape, 32, 33);
  auto inst = make_policy("kvmerger:decode_evict=true,theta=-1");
  PolicyDriver d(table, *inst.policy, prompt, budget, decode);
  check_every_head(d, decode, [&](const observation::StepInfo& step, int l, int g) {
    REQUIRE(d.cache().size(l, g) == std::min(step.seq_len, budget));
    int members = 0;
    for (int32_t c : d.cache().merge_counts(l, g)) members += c;
    REQUIRE(members == step.seq_len);  // nothing was dropped: every token lives on in some entry
  });
  CHECK(inst.policy->diagnostics().settings().at("decode_merges") ==
        std::to_string((prompt + decode - budget) * kShape.layers * kShape.kv_heads));
  // The pair's weights (Eq. 7-8 with sigma = the one distance): pivot 1 / (1 + e^-1/2), the other e^-1/2 / (...).
  const cache::CacheEdit& edit = d.last_edit();
  REQUIRE(!edit.heads.empty());
  REQUIRE(edit.heads[0].merges.size() == 1);
  const auto& w = edit.heads[0].merges[0].weights;
  REQUIRE(w.size() == 2);
  CHECK(w[0] == Approx(1.0 / (1.0 + std::exp(-0.5))).epsilon(1e-5));
  CHECK(w[1] == Approx(std::exp(-0.5) / (1.0 + std::exp(-0.5))).epsilon(1e-5));
}
