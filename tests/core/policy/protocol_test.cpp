// The protocol switches every scorer shares (block-wise prefill, decode-time eviction, trim before the
// output): with block prefill and decode eviction on, every scorer holds its budget after every step;
// CAOTE with score=base is the same policy as its base under one protocol; and docs/policies.md's table of
// which policy supports which switch is the one the registry generates.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/common/error.h"
#include "core/policy/allocation_catalog.h"
#include "core/policy/allocation_report.h"
#include "core/policy/decode_row_buffer.h"
#include "core/policy/protocol.h"
#include "core/policy/registry.h"
#include "tests/core/policy/policy_harness.h"

using namespace kvscope;
using namespace kvscope::test;
using policy::make_policy;

namespace {
const Shape kGqa{3, 9, 3, 4};
}  // namespace

namespace {

bool declares(const policy::PolicyInfo& info, const std::string& param) {
  return std::any_of(info.params.begin(), info.params.end(),
                     [&](const policy::ParamSpec& s) { return s.name == param; });
}

// Settings that let the registry's defaults act on a 37-token prompt with a budget of 10: a uniform
// allocation (so the budget every layer must hold is the run's), and an observation window of 4 (a window of
// 32 would hold the whole budget, leaving nothing to choose).
std::string small_run_settings(const policy::PolicyInfo& info) {
  std::string out;
  if (declares(info, "allocation")) out += ",allocation=uniform";
  // A policy's own window only: dynamickv's allocation parameter `window` exists only with allocation=dynamickv.
  const bool own_window = std::any_of(info.params.begin(), info.params.end(), [](const policy::ParamSpec& s) {
    return s.name == "window" && policy::allocations_declaring(s).empty();
  });
  if (own_window) out += ",window=4";
  return out;
}

}  // namespace

TEST_CASE("every registered policy with the protocol switches holds its budget after every step",
          "[policy][protocol]") {
  // Driven from the registry, so a new policy that declares the switches is covered without a line here.
  // The lengths are read from the cache the driver keeps (outside the policy) and compared with the run's
  // budget, not with what the policy promises.
  const int prompt = 37, budget = 10, decode = 6, block = 8;
  int with_block = 0, decode_only = 0;
  for (const auto& info : policy::all_policies()) {
    const bool has_block = declares(info, "block"), has_decode = declares(info, "decode_evict");
    if (!has_decode) continue;
    const std::string spec = info.name + ":decode_evict=true" + (has_block ? ",block=" + std::to_string(block) : "") +
                             small_run_settings(info);
    INFO(spec);
    AttentionTable table(kGqa, 64, 21);
    auto inst = make_policy(spec);
    REQUIRE(inst.policy->prefill_block_size() == (has_block ? block : 0));
    PolicyDriver d(table, *inst.policy, prompt, budget, decode);
    int steps = 0;
    std::vector<int> after_prompt;  // [layer * kv_heads + head], the one-pass policies' lengths after the prompt
    d.run(decode, [&](const observation::StepInfo& step) {
      ++steps;
      for (int l = 0; l < kGqa.layers; ++l)
        for (int g = 0; g < kGqa.kv_heads; ++g) {
          const int held = static_cast<int>(d.kept(l, g).size());
          if (has_block) {
            // Closed form: what the run has seen so far, capped at the budget.
            REQUIRE(held == std::min(step.seq_len, budget));
          } else if (step.phase == observation::Phase::Prefill) {
            // A one-pass policy's allocation may differ per layer: the layer's budget as the run resolved it.
            REQUIRE(held == inst.policy->layer_budgets()[l]);
            after_prompt.push_back(held);
          } else {
            REQUIRE(held == after_prompt[static_cast<std::size_t>(l) * kGqa.kv_heads + g]);
          }
        }
    });
    CHECK(steps == (has_block ? (prompt + block - 1) / block : 1) + decode);
    CHECK(inst.policy->diagnostics().settings().at("decode_evict") == "true");
    ++(has_block ? with_block : decode_only);
  }
  // The registry today: seven policies take both switches, dynamickv and kvmerger decode eviction only.
  CHECK(with_block >= 7);
  CHECK(decode_only >= 2);
  // Variants of CAOTE's base under the same switches.
  for (const std::string spec :
       {"caote:base=tova,block=8,decode_evict=true", "caote:base=snapkv,block=8,decode_evict=true,window=4"}) {
    INFO(spec);
    AttentionTable table(kGqa, 64, 21);
    auto inst = make_policy(spec);
    PolicyDriver d(table, *inst.policy, prompt, budget, decode);
    d.run(decode, [&](const observation::StepInfo& step) {
      for (int l = 0; l < kGqa.layers; ++l)
        for (int g = 0; g < kGqa.kv_heads; ++g)
          REQUIRE(static_cast<int>(d.kept(l, g).size()) == std::min(step.seq_len, budget));
    });
  }
}

TEST_CASE("a policy without a protocol switch refuses it by name", "[policy][protocol]") {
  int refused = 0;
  for (const auto& info : policy::all_policies())
    for (const std::string param : {"block", "decode_evict", "trim"}) {
      if (declares(info, param)) continue;
      INFO(info.name << " " << param);
      const std::string value = param == "block" ? "8" : param == "trim" ? "before_output" : "true";
      try {
        make_policy(info.name + ":" + param + "=" + value);
        FAIL("accepted a switch it does not have");
      } catch (const UsageError& e) {
        CHECK_THAT(e.what(), Catch::Contains("policy '" + info.name + "' has no parameter '" + param + "'") &&
                                 Catch::Contains("valid parameters"));
        ++refused;
      }
    }
  // full, d2o and cake take none of the three; dynamickv and kvmerger take decode_evict only.
  CHECK(refused >= 3 * 3 + 2 * 2);
}

TEST_CASE("pyramidkv with block prefill and decode eviction holds each layer's budget", "[policy][protocol]") {
  const int prompt = 37, budget = 12, decode = 5;
  AttentionTable table(kGqa, 64, 22);
  auto inst = make_policy("pyramidkv:block=8,decode_evict=true,window=4");
  PolicyDriver d(table, *inst.policy, prompt, budget, decode);
  // Each step adds its tokens and evicts down to the layer's budget: uniform before the last prompt block,
  // the pyramid's from then on. A layer the pyramid gives more than the blocks left it cannot get back
  // what they evicted, so it grows towards its budget one decode token at a time.
  std::vector<int> held(kGqa.layers, 0);
  int seen = 0;
  d.run(decode, [&](const observation::StepInfo& step) {
    const std::vector<int> budgets =
        step.prefill_done ? inst.policy->layer_budgets() : std::vector<int>(kGqa.layers, budget);
    for (int l = 0; l < kGqa.layers; ++l) {
      held[l] = std::min(held[l] + step.seq_len - seen, budgets[l]);
      for (int g = 0; g < kGqa.kv_heads; ++g) REQUIRE(static_cast<int>(d.kept(l, g).size()) == held[l]);
    }
    seen = step.seq_len;
  });
  const std::vector<int> budgets = inst.policy->layer_budgets();
  CHECK(budgets.front() > budgets.back());  // a pyramid, not the uniform shape
  CHECK(held.back() == budgets.back());
}

TEST_CASE("without decode eviction the prompt's policy appends decode tokens", "[policy][protocol]") {
  const int prompt = 30, budget = 10, decode = 4;
  for (const std::string spec : {"snapkv:window=4", "h2o:decode_evict=false", "caote:decode_evict=false,block=8"}) {
    INFO(spec);
    AttentionTable table(kGqa, 64, 23);
    auto inst = make_policy(spec);
    PolicyDriver d(table, *inst.policy, prompt, budget, decode);
    d.run(decode, [&](const observation::StepInfo& step) {
      const int want =
          step.phase == observation::Phase::Prefill ? std::min(step.seq_len, budget) : budget + (step.seq_len - prompt);
      if (step.prefill_done) REQUIRE(static_cast<int>(d.kept(0, 0).size()) == want);
    });
  }
}

TEST_CASE("caote:score=base is its base under the same protocol: h2o and tova keep the same entries",
          "[policy][protocol][caote]") {
  // CAOTE's H2O base keeps floor(0.5 b) recent entries as H2O does; TOVA keeps none. With CAOTE's term off
  // the two implementations must choose alike at every step (the paper's "base" rows).
  for (const auto& [twin, base] : std::vector<std::pair<std::string, std::string>>{
           {"caote:base=h2o,score=base,block=8", "h2o:block=8,trim=before_output"},
           {"caote:base=tova,score=base,block=8", "tova:block=8,trim=before_output"}}) {
    INFO(twin << " vs " << base);
    AttentionTable table(kGqa, 64, 24);
    auto a = make_policy(twin), b = make_policy(base);
    PolicyDriver da(table, *a.policy, 37, 10, 5), db(table, *b.policy, 37, 10, 5);
    std::vector<std::vector<int>> kept_a, kept_b;
    auto record = [&](PolicyDriver& d, std::vector<std::vector<int>>& out) {
      return [&d, &out](const observation::StepInfo&) {
        for (int l = 0; l < kGqa.layers; ++l)
          for (int g = 0; g < kGqa.kv_heads; ++g) out.push_back(d.kept(l, g));
      };
    };
    da.run(5, record(da, kept_a));
    db.run(5, record(db, kept_b));
    REQUIRE(kept_a.size() == kept_b.size());
    for (std::size_t i = 0; i < kept_a.size(); ++i) REQUIRE(kept_a[i] == kept_b[i]);
  }
  // ... and with CAOTE's term on, the choice differs somewhere, so the comparison above can fail.
  AttentionTable table(kGqa, 64, 24);
  auto a = make_policy("caote:base=h2o,block=8"), b = make_policy("h2o:block=8,trim=before_output");
  PolicyDriver da(table, *a.policy, 37, 10, 5), db(table, *b.policy, 37, 10, 5);
  da.run(5);
  db.run(5);
  bool differ = false;
  for (int l = 0; l < kGqa.layers; ++l)
    for (int g = 0; g < kGqa.kv_heads; ++g) differ = differ || da.kept(l, g) != db.kept(l, g);
  CHECK(differ);
}

TEST_CASE("decode_interval evicts every N-th decode step only, the cache growing between", "[policy][protocol]") {
  // kvpress DecodingPress(compression_interval=4, target_size=12) on a 10-token prompt: nothing leaves the prompt,
  // then decode steps 4, 8, ... (0-based 3, 7, ...) compress to 12.
  const int prompt = 10, budget = 12, decode = 10, interval = 4;
  for (const std::string spec : {"snapkv:window=4,decode_evict=true,decode_interval=4",
                                 "h2o:decode_evict=true,decode_interval=4"}) {
    INFO(spec);
    AttentionTable table(kGqa, 64, 27);
    auto inst = make_policy(spec);
    PolicyDriver d(table, *inst.policy, prompt, budget, decode);
    int held = prompt, evictions = 0;
    d.run(decode, [&](const observation::StepInfo& step) {
      if (step.phase != observation::Phase::Decode) return;
      held += 1;
      if ((step.step + 1) % interval == 0) held = std::min(held, budget), ++evictions;
      INFO("decode step " << step.step);
      for (int l = 0; l < kGqa.layers; ++l)
        for (int g = 0; g < kGqa.kv_heads; ++g) REQUIRE(static_cast<int>(d.kept(l, g).size()) == held);
    });
    CHECK(evictions == 2);
    CHECK(inst.policy->diagnostics().settings().at("decode_interval") == "4");
  }
  CHECK_THROWS_WITH(make_policy("snapkv:decode_interval=4"), Catch::Contains("needs decode_evict=true"));
  CHECK_THROWS_WITH(make_policy("snapkv:decode_evict=true,decode_interval=4,trim=before_output"),
                    Catch::Contains("trim=after_output"));
  CHECK_THROWS_WITH(make_policy("caote:decode_interval=4,trim=after_output"),
                    Catch::Contains("decode_interval=4 is not supported"));
}

TEST_CASE("prefill_evict=false leaves the prompt whole and only decoding evicts", "[policy][protocol]") {
  // kvpress DecodingPress(compression_interval=N, target_size=8) on a 20-token prompt: the prefill is not compressed;
  // decode steps N, 2N, ... (0-based N - 1, ...) compress to 8 although the prompt is longer.
  const int prompt = 20, budget = 8, decode = 9;
  for (const int interval : {1, 4}) {
    for (const std::string base : {"snapkv:window=4", "h2o"}) {
      const std::string spec = base + (base == "h2o" ? ":" : ",") +
                               "decode_evict=true,prefill_evict=false,decode_interval=" + std::to_string(interval);
      INFO(spec);
      AttentionTable table(kGqa, 64, 31);
      auto inst = make_policy(spec);
      PolicyDriver d(table, *inst.policy, prompt, budget, decode);
      int held = prompt;
      d.run(decode, [&](const observation::StepInfo& step) {
        if (step.phase == observation::Phase::Decode) {
          held += 1;
          if ((step.step + 1) % interval == 0) held = std::min(held, budget);
        }
        INFO((step.phase == observation::Phase::Decode ? "decode step " : "prefill step ") << step.step);
        for (int l = 0; l < kGqa.layers; ++l)
          for (int g = 0; g < kGqa.kv_heads; ++g) REQUIRE(static_cast<int>(d.kept(l, g).size()) == held);
      });
      CHECK(held == budget + (decode % interval));
      CHECK(inst.policy->diagnostics().settings().at("prefill_evict") == "false");
    }
  }
  CHECK_THROWS_WITH(make_policy("snapkv:prefill_evict=false"), Catch::Contains("needs decode_evict=true"));
  CHECK_THROWS_WITH(make_policy("h2o:prefill_evict=false,block=8"), Catch::Contains("use block=0"));
  CHECK_THROWS_WITH(make_policy("caote:block=0,prefill_evict=false"),
                    Catch::Contains("prefill_evict=false is not supported"));
}

TEST_CASE("decode_buffer bounds the earlier decode steps an evicting step is scored on", "[policy][protocol]") {
  // kvpress DecodingPress trims its buffer to hidden_states_buffer_size after every step that does not compress, so
  // the compressing step scores its own row and at most that many earlier ones (none for 0).
  for (const auto& [buffer, rows] : {std::pair{256, 6}, std::pair{3, 4}, std::pair{0, 1}}) {
    INFO("decode_buffer " << buffer);
    policy::DecodeRowBuffer b;
    b.reset(1, buffer);
    observation::AttentionObservation obs;
    obs.phase = observation::Phase::Decode;
    for (int step = 0; step < 6; ++step) {
      obs.query_positions = {100 + step};
      obs.queries_pre_rope = {static_cast<float>(step), static_cast<float>(-step)};
      b.append(obs);
      if (step < 5) b.trim(0);
    }
    const observation::AttentionObservation taken = b.take(obs);
    std::vector<int32_t> want;
    std::vector<float> want_queries;
    for (int step = 6 - rows; step < 6; ++step) {
      want.push_back(100 + step);
      want_queries.insert(want_queries.end(), {static_cast<float>(step), static_cast<float>(-step)});
    }
    CHECK(taken.query_positions == want);
    CHECK(taken.queries_pre_rope == want_queries);
  }
  auto inst = make_policy("h2o:decode_evict=true,decode_interval=4");
  CHECK(inst.params.get_int("decode_buffer") == 256);
  AttentionTable table(kGqa, 64, 43);
  PolicyDriver d(table, *inst.policy, 10, 8, 1);
  CHECK(inst.policy->diagnostics().settings().at("decode_buffer") == "256");
  CHECK_THROWS_WITH(make_policy("snapkv:decode_evict=true,decode_interval=4,decode_buffer=-1"),
                    Catch::Contains("decode_buffer") && Catch::Contains("-1"));
  CHECK_THROWS_WITH(make_policy("snapkv:decode_buffer=8"),
                    Catch::Contains("decode_buffer=8 needs decode_evict=true"));
}

namespace {
// RoPE by hand: pair (2i, 2i+1) of a head vector turned by position x 10000^(-2i / head_dim) (the harness's model).
std::vector<double> rotated(std::vector<double> v, int position) {
  const int d = static_cast<int>(v.size());
  for (int i = 0; i < d / 2; ++i) {
    const double theta = position * std::pow(10000.0, -2.0 * i / d), a = v[2 * i], b = v[2 * i + 1];
    v[2 * i] = a * std::cos(theta) - b * std::sin(theta);
    v[2 * i + 1] = a * std::sin(theta) + b * std::cos(theta);
  }
  return v;
}
}  // namespace

TEST_CASE("snapkv under decode_interval scores the buffered steps' last queries, rotated to the evicting step, as "
          "kvpress's SnapKVPress under DecodingPress", "[policy][protocol]") {
  // DecodingPress(SnapKVPress(window_size=2, kernel_size=3), compression_interval=4, target_size=9) on a 12-token
  // prompt: at decode steps 3 and 7 each KV head keeps its last 2 entries and the 7 best of the rest by the window's
  // attention: the last 2 buffered queries before RoPE, both rotated to the evicting step's position, over the whole
  // cache (query i seeing entries up to n - 2 + i), averaged over the KV head's query heads, pooled (3 wide, zero
  // padded) over the entries before the window in kvpress's cache order: by position at first; after a compression
  // the window (newest first) and then the kept entries by decreasing score, the decode tokens appended after them.
  const int prompt = 12, budget = 9, decode = 8, window = 2, kernel = 3, d = kGqa.head_dim, group = kGqa.group();
  AttentionTable table(kGqa, 64, 47);
  // The same keys, never evicted: the harness draws them in the same order whatever the policy does.
  auto full = make_policy("full");
  PolicyDriver all(table, *full.policy, prompt, 1000, decode);
  all.run(decode);
  auto inst = make_policy("snapkv:window=2,kernel=3,decode_evict=true,decode_interval=4,prefill_evict=false");
  PolicyDriver drv(table, *inst.policy, prompt, budget, decode);
  std::vector<std::vector<std::vector<int>>> held(kGqa.layers, std::vector<std::vector<int>>(kGqa.kv_heads));
  auto kvpress_order = held;  // positions in kvpress's cache order
  int checked = 0;
  drv.run(decode, [&](const observation::StepInfo& step) {
    for (int l = 0; l < kGqa.layers; ++l)
      for (int g = 0; g < kGqa.kv_heads; ++g) {
        std::vector<int> before = held[l][g];
        const int current = prompt + (step.phase == observation::Phase::Decode ? step.step : -1);
        if (step.phase == observation::Phase::Decode) before.push_back(current);
        held[l][g] = drv.kept(l, g);
        std::vector<int>& order = kvpress_order[l][g];
        if (step.phase == observation::Phase::Prefill) order = drv.kept(l, g);
        else order.push_back(current);
        if (step.phase != observation::Phase::Decode || (step.step + 1) % 4 != 0) continue;
        const int n = static_cast<int>(before.size());
        REQUIRE(sorted(order) == before);
        std::vector<double> scores(n, 0.0);
        for (int h = g * group; h < (g + 1) * group; ++h)
          for (int i = 0; i < window; ++i) {
            const std::vector<float> q32 = drv.queries_pre_rope(l, {current - window + 1 + i});
            const std::vector<double> q =
                rotated({q32.begin() + h * d, q32.begin() + (h + 1) * d}, current);
            std::vector<double> p;
            double total = 0.0;
            for (int j = 0; j <= n - window + i; ++j) {
              const auto keys = all.cache().keys(l, g);  // position x is entry x: nothing evicted there
              double dot = 0.0;
              for (int e = 0; e < d; ++e) dot += q[e] * keys[static_cast<std::size_t>(before[j]) * d + e];
              p.push_back(std::exp(dot / std::sqrt(static_cast<double>(d))));
              total += p.back();
            }
            for (std::size_t j = 0; j < p.size(); ++j) scores[j] += p[j] / total / group;
          }
        auto score_of = [&](int position) {
          return scores[std::find(before.begin(), before.end(), position) - before.begin()];
        };
        std::vector<std::pair<int, double>> prefix;
        for (int k = 0; k < n - window; ++k) {
          double pooled = 0.0;
          for (int m = k - kernel / 2; m <= k + kernel / 2; ++m)
            if (m >= 0 && m < n - window) pooled += score_of(order[m]);
          prefix.push_back({order[k], pooled / kernel});
        }
        std::vector<int> want = top_k_by_hand(prefix, budget - window);
        std::vector<int> next(order.rbegin(), order.rbegin() + window);
        next.insert(next.end(), want.begin(), want.end());
        want.insert(want.end(), order.end() - window, order.end());
        INFO("layer " << l << " kv head " << g << " decode step " << step.step);
        CHECK(sorted(want) == drv.kept(l, g));
        order = next;
        ++checked;
      }
  });
  CHECK(checked == 2 * kGqa.layers * kGqa.kv_heads);
}

TEST_CASE("block_scoring is refused where it cannot act",
          "[policy][protocol]") {
  // kvpress BlockPress gives its press no attention weights: a scorer of attention is refused when the run begins.
  AttentionTable table(kGqa, 64, 33);
  auto inst = make_policy("h2o:block_scoring=4,decode_evict=false");
  CHECK_THROWS_WITH(PolicyDriver(table, *inst.policy, 20, 8, 2), Catch::Contains("reads attention"));
  CHECK_THROWS_WITH(make_policy("h2o:block_scoring=4,block=8"), Catch::Contains("use one of them"));
  CHECK_THROWS_WITH(make_policy("h2o:block_scoring=4,prefill_evict=false"), Catch::Contains("does not evict"));
  CHECK_THROWS_WITH(make_policy("h2o:block_scoring=4,selection=adakv"), Catch::Contains("selection=topk"));
  CHECK_THROWS_WITH(make_policy("caote:block=0,block_scoring=4"), Catch::Contains("does not take block_scoring"));
}

TEST_CASE("selection=chunk and entropy_chunkkv are refused where kvpress's presses cannot act", "[policy][protocol]") {
  // kvpress ChunkPress gives its press no attention weights and compresses a one-pass prefill.
  AttentionTable table(kGqa, 64, 33);
  auto inst = make_policy("h2o:selection=chunk,chunk_length=8,decode_evict=false");
  CHECK_THROWS_WITH(PolicyDriver(table, *inst.policy, 20, 8, 2), Catch::Contains("selection=chunk's chunks"));
  CHECK_THROWS_WITH(make_policy("h2o:selection=chunk,decode_evict=true"), Catch::Contains("decode_evict=false"));
  CHECK_THROWS_WITH(make_policy("h2o:selection=chunk,block=8,decode_evict=false"), Catch::Contains("use block=0"));
  CHECK_THROWS_WITH(make_policy("snapkv:selection=entropy_chunkkv,chunk_length=4,low_entropy_chunk_length=4"),
                    Catch::Contains("must be below chunk_length=4"));
  CHECK_THROWS_WITH(make_policy("snapkv:low_entropy_chunk_length=2"),
                    Catch::Contains("belongs to selection=entropy_chunkkv"));
}

TEST_CASE("the protocol switches report themselves as run settings", "[policy][protocol]") {
  AttentionTable table(kGqa, 64, 25);
  auto inst = make_policy("snapkv:block=8,decode_evict=true,trim=before_output,window=4");
  PolicyDriver d(table, *inst.policy, 20, 10, 1);
  d.run(1);
  const auto& settings = inst.policy->diagnostics().settings();
  CHECK(settings.at("block") == "8");
  CHECK(settings.at("decode_evict") == "true");
  CHECK(settings.at("trim") == "\"before_output\"");
  CHECK(settings.at("layer_budgets") == "[10, 10, 10]");
  CHECK(inst.policy->trims_before_output(observation::Phase::Prefill));
  CHECK(inst.policy->trims_before_output(observation::Phase::Decode));
  // A one-pass prefill never trims before its output; decode does when it evicts.
  auto one_pass = make_policy("h2o:trim=before_output");
  CHECK_FALSE(one_pass.policy->trims_before_output(observation::Phase::Prefill));
  CHECK(one_pass.policy->trims_before_output(observation::Phase::Decode));
  CHECK_FALSE(make_policy("h2o").policy->trims_before_output(observation::Phase::Decode));
  CHECK(make_policy("caote").policy->trims_before_output(observation::Phase::Prefill));
  // Blocks of 8 within a budget of 10 need no warning; blocks of 16 trimmed before their output do.
  for (const auto& w : inst.policy->diagnostics().warnings()) CHECK(w.find("prefill blocks") == std::string::npos);
  auto long_blocks = make_policy("caote:block=16");
  PolicyDriver dl(table, *long_blocks.policy, 20, 10, 0);
  dl.run(0);
  REQUIRE(!long_blocks.policy->diagnostics().warnings().empty());
  CHECK_THAT(long_blocks.policy->diagnostics().warnings()[0],
             Catch::Contains("blocks of 16 tokens are longer than the budget of 10") && Catch::Contains("at least 6"));
}

TEST_CASE("layers an allocation leaves whole, below the window or below the floor become warnings",
          "[policy][protocol]") {
  policy::Diagnostics out;
  // Hand-made budgets of a 40-token prompt with a 32-token window.
  policy::report_layer_budgets({40, 40, 50, 31, 20, 10, 33}, 40, 32, 32, "policy 'x'", out);
  CHECK(out.settings().at("layers_whole_prompt") == "[0, 1, 2]");
  CHECK(out.settings().at("layers_below_window") == "[3, 4, 5]");
  CHECK(out.settings().at("layers_below_floor") == "[5]");
  REQUIRE(out.warnings().size() == 3);
  CHECK_THAT(out.warnings()[0], Catch::Contains("layers 0-2 keep the whole prompt (40 tokens)"));
  CHECK_THAT(out.warnings()[1], Catch::Contains("layers 3-5 get 10-31 tokens") && Catch::Contains("window of 32"));
  CHECK_THAT(out.warnings()[2], Catch::Contains("layers 5 get 10 tokens, fewer than 16"));
  // Every layer holding the prompt is the user's budget: no warning.
  policy::Diagnostics all;
  policy::report_layer_budgets({40, 40}, 40, 40, 0, "policy 'x'", all);
  CHECK(all.warnings().empty());
  // Nor is a small budget the user gave every layer.
  policy::Diagnostics small;
  policy::report_layer_budgets({4, 4, 4}, 40, 4, 32, "policy 'x'", small);
  CHECK(small.warnings().empty());
  CHECK(small.settings().at("layers_below_floor") == "[]");
}

TEST_CASE("docs/policies.md's protocol table is the registry's", "[policy][protocol][docs]") {
  std::ifstream in(std::filesystem::path(KVSCOPE_SOURCE_DIR) / "docs" / "policies.md");
  REQUIRE(in.good());
  std::stringstream page;
  page << in.rdbuf();
  const std::string table = policy::protocol_table_markdown();
  INFO("regenerate it with `kvscope policies --protocols`:\n" << table);
  CHECK(page.str().find(table) != std::string::npos);
  // Every policy has a row.
  for (const auto& info : policy::all_policies()) CHECK(table.find("| " + info.name + " |") != std::string::npos);
}
