// DynamicKV against Algorithm 1 written out by hand over an explicit attention table: window scores with
// pooling (eq. 1), per-layer buffers (eqs. 2-4), and the global top-k re-allocation every m layers with the
// official code's arithmetic (eqs. 5-8), buffers that only shrink, then decode tokens appended.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "core/policy/registry.h"
#include "tests/core/policy/policy_harness.h"

using namespace kvscope;
using namespace kvscope::test;
using policy::make_policy;

namespace {

struct Config {
  std::string spec;
  int prompt, budget;
  int window, kernel;
  bool max_pool;
  double r_max;
  int interval;
  bool code = false;  // arithmetic=code: count // l' and sum-normalisation
};

struct Update {
  int seen;
  std::vector<long> counts;
  std::vector<int> allocation, lengths;
};

struct ByHand {
  int window = 0, base = 0, scored = 0, buffer = 0;
  std::vector<std::vector<std::vector<double>>> scores;  // [layer][kv head][key]
  std::vector<Update> updates;
  std::vector<int> lengths;
  std::vector<std::vector<std::vector<int>>> kept;  // [layer][kv head] positions after prefill
};

// Eq. 1 for (layer, kv head): mean over the group's query heads of the window's summed attention to each
// key before the window, then 1-D pooling (average with the zero padding in the divisor, or maximum).
std::vector<double> window_scores_by_hand(const AttentionTable& table, int layer, int g, int prompt, int window,
                                          int kernel, bool max_pool) {
  const Shape& s = table.shape();
  std::vector<int> keys;
  for (int j = 0; j < prompt; ++j) keys.push_back(j);
  const int scored = prompt - window;
  std::vector<double> raw(scored, 0.0);
  for (int h = g * s.group(); h < (g + 1) * s.group(); ++h)
    for (int q = prompt - window; q < prompt; ++q) {
      const auto p = table.row(layer, h, q, keys);
      for (int j = 0; j < scored; ++j) raw[j] += p[j] / s.group();
    }
  std::vector<double> pooled(scored);
  for (int j = 0; j < scored; ++j) {
    double acc = max_pool ? -1.0 : 0.0;
    for (int t = j - kernel / 2; t <= j + kernel / 2; ++t) {
      if (t < 0 || t >= scored) continue;
      acc = max_pool ? std::max(acc, raw[t]) : acc + raw[t];
    }
    pooled[j] = max_pool ? acc : acc / kernel;
  }
  return pooled;
}

// Algorithm 1 with the corrections of spec B3/B6: sum over the window, count // l', floor arithmetic,
// the last layer seen takes the remainder, an update at the last layer, and len_i = min(BL_i, len_i).
ByHand dynamickv_by_hand(const AttentionTable& table, const Config& c) {
  const Shape& s = table.shape();
  const int L = s.layers;
  ByHand r;
  r.window = std::min(c.window, c.budget);
  r.base = c.budget - r.window;
  r.scored = c.prompt - r.window;
  r.buffer = std::min(static_cast<int>(c.r_max * r.base), r.scored);
  r.scores.resize(L);
  r.lengths.assign(L, 0);
  for (int l = 0; l < L; ++l) {
    for (int g = 0; g < s.kv_heads; ++g)
      r.scores[l].push_back(window_scores_by_hand(table, l, g, c.prompt, r.window, c.kernel, c.max_pool));
    r.lengths[l] = r.buffer;
    if ((l + 1) % c.interval != 0 && l != L - 1) continue;
    const int seen = l + 1;
    std::vector<std::tuple<double, int, int, int>> all;  // -score, layer, head, key: sorts best first
    for (int i = 0; i < seen; ++i)
      for (int g = 0; g < s.kv_heads; ++g)
        for (int j = 0; j < r.scored; ++j) all.emplace_back(-r.scores[i][g][j], i, g, j);
    std::sort(all.begin(), all.end());
    const long k = static_cast<long>(r.base) * s.kv_heads * seen;
    Update u;
    u.seen = seen;
    u.counts.assign(seen, 0);
    for (long w = 0; w < k && w < static_cast<long>(all.size()); ++w) ++u.counts[std::get<1>(all[w])];
    // Eq. 6-7. Paper: C = count / l', Z = floor(bs * C / max C). Code: C = count // l', Z = floor(bs * C / sum C).
    std::vector<long> cnt(u.counts);
    long sum_c = 0, max_c = 0;
    for (long& x : cnt) {
      if (c.code) x /= seen;
      sum_c += x;
      max_c = std::max(max_c, x);
    }
    const long norm = c.code ? sum_c : max_c;
    u.allocation.assign(seen, 0);
    long sum_z = 0;
    for (int i = 0; i < seen; ++i) {
      if (norm > 0) u.allocation[i] = static_cast<int>(std::floor(static_cast<double>(r.buffer) * cnt[i] / norm));
      sum_z += u.allocation[i];
    }
    const long total = static_cast<long>(r.base) * L;
    if (sum_z > 0) {
      const double ratio = static_cast<double>(sum_z) / total;
      for (int& z : u.allocation) z = static_cast<int>(std::floor(z / ratio));
    }
    long after = 0;
    for (int z : u.allocation) after += z;
    u.allocation[seen - 1] += static_cast<int>(total - after);
    for (int i = 0; i < seen; ++i) r.lengths[i] = std::max(0, std::min({u.allocation[i], r.lengths[i], r.scored}));
    u.lengths.assign(r.lengths.begin(), r.lengths.begin() + seen);
    r.updates.push_back(u);
  }
  r.kept.resize(L);
  for (int l = 0; l < L; ++l)
    for (int g = 0; g < s.kv_heads; ++g) {
      std::vector<std::pair<int, double>> ranked;
      for (int j = 0; j < r.scored; ++j) ranked.push_back({j, r.scores[l][g][j]});
      std::vector<int> keep = top_k_by_hand(ranked, r.lengths[l]);
      for (int j = r.scored; j < c.prompt; ++j) keep.push_back(j);
      r.kept[l].push_back(sorted(keep));
    }
  return r;
}

const policy::Series& series(const policy::Policy& p, const std::string& name) {
  const policy::Series* s = p.diagnostics().find(name);
  INFO("diagnostic " << name);
  REQUIRE(s != nullptr);
  return *s;
}

std::vector<double> row(const policy::Series& s, int r) {
  const int width = s.shape.at(1);
  return {s.values.begin() + static_cast<long>(r) * width, s.values.begin() + static_cast<long>(r + 1) * width};
}

}  // namespace

TEST_CASE("dynamickv follows Algorithm 1 written out by hand", "[policy][dynamickv]") {
  const std::vector<Config> configs = {
      {"dynamickv:window=4,kernel=5,r_max=2", 48, 16, 4, 5, false, 2.0, 4},
      {"dynamickv:window=4,kernel=3,pooling=max,interval=2,r_max=3", 40, 12, 4, 3, true, 3.0, 2},
      {"dynamickv", 60, 20, 8, 7, false, 10.0, 4},  // the code's defaults: ws 8, kernel 7, avg, r_max 10, m 4
      {"dynamickv:window=2,kernel=1,interval=1,r_max=1.5", 30, 10, 2, 1, false, 1.5, 1},
      {"dynamickv:window=4,kernel=5,r_max=2,arithmetic=code", 48, 16, 4, 5, false, 2.0, 4, true},
      {"dynamickv:arithmetic=code,interval=3", 60, 20, 8, 7, false, 10.0, 3, true},
  };
  for (const Shape& shape : {Shape{6, 9, 3, 4}, Shape{5, 3, 3, 4}})
    for (const Config& c : configs) {
      INFO(c.spec << " layers " << shape.layers << " heads " << shape.heads);
      AttentionTable table(shape, 96, 31);
      const ByHand want = dynamickv_by_hand(table, c);
      auto inst = make_policy(c.spec);
      const int decode = 4;
      PolicyDriver d(table, *inst.policy, c.prompt, c.budget, decode);
      d.run(decode, [&](const observation::StepInfo& step) {
        const int generated = step.phase == Phase::Decode ? step.step + 1 : 0;
        for (int l = 0; l < shape.layers; ++l)
          for (int g = 0; g < shape.kv_heads; ++g) {
            INFO("layer " << l << " kv head " << g << " generated " << generated);
            std::vector<int> expected = want.kept[l][g];
            for (int p = c.prompt; p < c.prompt + generated; ++p) expected.push_back(p);
            REQUIRE(d.kept(l, g) == expected);
          }
      });
      std::vector<int> budgets;
      for (int len : want.lengths) budgets.push_back(len + want.window);
      CHECK(inst.policy->layer_budgets() == budgets);

      const auto& seen = series(*inst.policy, "update_layers");
      const auto& counts = series(*inst.policy, "winner_counts");
      const auto& allocation = series(*inst.policy, "allocation");
      const auto& lengths = series(*inst.policy, "buffer_length");
      REQUIRE(seen.shape[0] == static_cast<int>(want.updates.size()));
      for (std::size_t u = 0; u < want.updates.size(); ++u) {
        INFO("update " << u);
        const Update& w = want.updates[u];
        CHECK(seen.values[u] == w.seen);
        const auto c_row = row(counts, static_cast<int>(u)), a_row = row(allocation, static_cast<int>(u)),
                   l_row = row(lengths, static_cast<int>(u));
        long total = 0;
        for (int l = 0; l < shape.layers; ++l) {
          if (l < w.seen) {
            CHECK(c_row[l] == w.counts[l]);
            CHECK(a_row[l] == w.allocation[l]);
            CHECK(l_row[l] == w.lengths[l]);
            total += static_cast<long>(a_row[l]);
          } else {
            CHECK(std::isnan(a_row[l]));
          }
        }
        // Eq. 8 normalises every update to the whole model's (wt - ws) * L.
        CHECK(total == static_cast<long>(want.base) * shape.layers);
      }
      // Edits reached back: every layer before the last update was cut after its own buffer edit.
      CHECK(d.edits() >= 1);
    }
}

TEST_CASE("dynamickv's final budgets sum to the global budget and no layer exceeds its buffer", "[policy][dynamickv]") {
  const Shape shape{8, 9, 3, 4};
  for (unsigned seed = 40; seed < 46; ++seed)
    for (const std::string extra : {"", ",refill=true"}) {
      INFO("seed " << seed << extra);
      AttentionTable table(shape, 64, seed);
      const int prompt = 50, budget = 14, window = 4, base = budget - window;
      const double r_max = 1.5 + (seed % 3);
      auto inst = make_policy("dynamickv:window=4,kernel=5,r_max=" + std::to_string(r_max) + extra);
      PolicyDriver d(table, *inst.policy, prompt, budget, 2);
      d.run(2);
      const int buffer = std::min(static_cast<int>(r_max * base), prompt - window);
      const auto& allocation = series(*inst.policy, "allocation");
      const auto& lengths = series(*inst.policy, "buffer_length");
      const int updates = allocation.shape[0];
      const auto final_allocation = row(allocation, updates - 1);
      const auto final_length = row(lengths, updates - 1);
      long allocated = 0, kept = 0, room = 0;
      for (int l = 0; l < shape.layers; ++l) {
        allocated += static_cast<long>(final_allocation[l]);
        kept += static_cast<long>(final_length[l]);
        CHECK(final_length[l] <= buffer);
        for (int g = 0; g < shape.kv_heads; ++g) CHECK(d.cache().size(l, g) == final_length[l] + window + 2);
        // What a layer held before the last update bounds what it can keep (buffers only shrink).
        const double before = updates > 1 && !std::isnan(row(lengths, updates - 2)[l]) ? row(lengths, updates - 2)[l] : buffer;
        CHECK(final_length[l] <= before);
        room += static_cast<long>(before);
        if (extra.empty()) CHECK(final_length[l] == std::min<double>(final_allocation[l], before));
      }
      CHECK(allocated == static_cast<long>(base) * shape.layers);
      CHECK(kept <= static_cast<long>(base) * shape.layers);
      if (!extra.empty()) CHECK(kept == std::min(room, static_cast<long>(base) * shape.layers));
    }
}

TEST_CASE("dynamickv with a budget that holds the prompt keeps everything, like full", "[policy][dynamickv]") {
  for (const Shape& shape : {Shape{2, 9, 3, 4}, Shape{2, 3, 3, 4}})
    for (int budget : {12, 30}) {
      AttentionTable table(shape, 64, 32);
      auto inst = make_policy("dynamickv");
      auto full = make_policy("full");
      const int prompt = 12, decode = 6;
      PolicyDriver d(table, *inst.policy, prompt, budget, decode), f(table, *full.policy, prompt, budget, decode);
      std::vector<std::vector<int>> full_kept;
      f.run(decode, [&](const observation::StepInfo&) { full_kept.push_back(f.kept(shape.layers - 1, shape.kv_heads - 1)); });
      std::size_t step = 0;
      d.run(decode, [&](const observation::StepInfo& info) {
        for (int l = 0; l < shape.layers; ++l)
          for (int g = 0; g < shape.kv_heads; ++g) {
            REQUIRE(d.cache().size(l, g) == info.seq_len);
            for (int i = 0; i < info.seq_len; ++i) REQUIRE(d.cache().positions(l, g)[i] == i);
          }
        CHECK(d.kept(shape.layers - 1, shape.kv_heads - 1) == full_kept[step++]);
      });
      CHECK(d.edits() == 0);
      CHECK(inst.policy->layer_budgets() == std::vector<int>(shape.layers, prompt));
    }
}

TEST_CASE("dynamickv with a budget no larger than its window keeps the window alone", "[policy][dynamickv]") {
  const Shape shape{3, 9, 3, 4};
  AttentionTable table(shape, 64, 33);
  auto inst = make_policy("dynamickv");  // window 8
  PolicyDriver d(table, *inst.policy, 30, 5, 2);
  d.run(2);
  for (int l = 0; l < shape.layers; ++l)
    for (int g = 0; g < shape.kv_heads; ++g) CHECK(d.kept(l, g) == std::vector<int>{25, 26, 27, 28, 29, 30, 31});
}

TEST_CASE("the one-shot dynamickv allocation gives a scorer the global top-k budgets", "[policy][dynamickv][allocation]") {
  const Shape shape{5, 9, 3, 4};
  AttentionTable table(shape, 64, 34);
  // With interval = L the progressive policy runs exactly one update, after the last layer: the one-shot
  // allocation's arithmetic. snapkv shares the window, kernel and pooling parameters with it.
  Config c{"", 48, 16, 4, 5, false, 2.0, shape.layers};
  const ByHand want = dynamickv_by_hand(table, c);
  REQUIRE(want.updates.size() == 1);
  auto snap = make_policy("snapkv:window=4,kernel=5,r_max=2,allocation=dynamickv");
  PolicyDriver d(table, *snap.policy, c.prompt, c.budget, 1);
  d.run(1);
  std::vector<int> budgets;
  long sum = 0;
  for (int a : want.updates[0].allocation) {
    budgets.push_back(std::clamp(a, 0, want.buffer) + want.window);
    sum += budgets.back();
  }
  CHECK(snap.policy->layer_budgets() == budgets);
  CHECK(sum == static_cast<long>(shape.layers) * c.budget);
  const auto& counts = series(*snap.policy, "winner_counts");
  for (int l = 0; l < shape.layers; ++l) CHECK(counts.values[l] == want.updates[0].counts[l]);
  for (int l = 0; l < shape.layers; ++l)
    for (int g = 0; g < shape.kv_heads; ++g) CHECK(d.cache().size(l, g) == budgets[l] + 1);
}

TEST_CASE("dynamickv parameters carry the official code's defaults", "[policy][dynamickv]") {
  const auto p = make_policy("dynamickv").params;
  CHECK(p.get_int("window") == 8);
  CHECK(p.get_int("kernel") == 7);
  CHECK(p.get_choice("pooling") == "avg");
  CHECK(p.get_float("r_max") == 10.0);
  CHECK(p.get_int("interval") == 4);
  CHECK(p.get_bool("refill") == false);
  CHECK(p.get_choice("arithmetic") == "paper");
  CHECK(make_policy("dynamickv").policy->prefill_block_size() == 0);
  CHECK_THROWS_WITH(make_policy("dynamickv:kernel=4"), Catch::Contains("odd"));
}
