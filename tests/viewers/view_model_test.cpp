// View-model logic against direct computations: pooling by brute force over source cells, kept sets by
// explicit set operations, and the events table replayed by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <random>
#include <set>

#include "core/common/error.h"
#include "viewers/compare_view.h"
#include "viewers/eviction_timeline.h"
#include "viewers/similarity_map.h"
#include "viewers/view_model.h"

using namespace kvscope;
using namespace kvscope::viewers;

namespace {

trace::Map2D random_map(int rows, int cols, trace::Pooling pooling, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  trace::Map2D m;
  m.rows = m.source_rows = rows;
  m.cols = m.source_cols = cols;
  m.pooling = pooling;
  m.values.resize(static_cast<std::size_t>(rows) * cols);
  for (auto& v : m.values) v = u(rng);
  return m;
}

// Direct pooling of a full-resolution map over blocks of (rb, cb) source cells.
float reference_pool(const trace::Map2D& full, int r, int c, int rb, int cb) {
  double acc = full.pooling == trace::Pooling::Max ? -1e30 : 0.0;
  int n = 0;
  for (int i = r * rb; i < std::min((r + 1) * rb, full.rows); ++i)
    for (int j = c * cb; j < std::min((c + 1) * cb, full.cols); ++j) {
      acc = full.pooling == trace::Pooling::Max ? std::max(acc, static_cast<double>(full.at(i, j))) : acc + full.at(i, j);
      ++n;
    }
  return static_cast<float>(full.pooling == trace::Pooling::Max ? acc : acc / n);
}

}  // namespace

TEST_CASE("linked selection moves every column, clamped to each run", "[view_model]") {
  const std::vector<RunShape> shapes = {{30, 9, 3, 100, 10}, {12, 4, 2, 100, 10}, {30, 9, 3, 100, 10}};
  LinkedSelection sel;
  sel.resize(3);
  sel.set_layer(0, 20, shapes);
  CHECK(sel[0].layer == 20);
  CHECK(sel[1].layer == 11);  // that run has only 12 layers
  CHECK(sel[2].layer == 20);
  sel.set_head(2, 7, shapes);
  CHECK(sel[0].head == 7);
  CHECK(sel[1].head == 3);
  sel.linked = false;
  sel.set_layer(1, 2, shapes);
  CHECK(sel[0].layer == 20);
  CHECK(sel[1].layer == 2);
  CHECK(sel[2].layer == 20);
  sel.set_step(0, 99, shapes);
  CHECK(sel[0].step == 9);
  CHECK(sel[1].step == -1);
}

TEST_CASE("grouped-query heads map to their KV head", "[view_model]") {
  const RunShape s{30, 9, 3, 0, 0};
  CHECK(kv_head_of(0, s) == 0);
  CHECK(kv_head_of(2, s) == 0);
  CHECK(kv_head_of(3, s) == 1);
  CHECK(kv_head_of(8, s) == 2);
}

TEST_CASE("pooling for display equals pooling the source directly", "[view_model]") {
  for (auto pooling : {trace::Pooling::Max, trace::Pooling::Mean}) {
    const trace::Map2D full = random_map(37, 23, pooling, 7);
    // Two stages (3x2 stored, then x2 x3 for display) must equal one stage of 6x6 over the source,
    // including the ragged last blocks.
    const trace::Map2D stored = pool_by(full, 3, 2);
    CHECK(stored.rows == 13);
    CHECK(stored.cols == 12);
    const trace::Map2D shown = pool_by(stored, 2, 3);
    REQUIRE(shown.row_block == 6);
    REQUIRE(shown.col_block == 6);
    REQUIRE(shown.rows == 7);
    REQUIRE(shown.cols == 4);
    for (int r = 0; r < shown.rows; ++r)
      for (int c = 0; c < shown.cols; ++c) CHECK(shown.at(r, c) == Approx(reference_pool(full, r, c, 6, 6)).epsilon(1e-5));
  }
  const trace::Map2D big = random_map(300, 1000, trace::Pooling::Max, 3);
  const trace::Map2D fit = pool_for_display(big, 128, 128);
  CHECK(fit.rows <= 128);
  CHECK(fit.cols <= 128);
  CHECK(fit.source_cols == 1000);
  const trace::Map2D small = pool_for_display(big, 4096, 4096);
  CHECK(small.values == big.values);
}

TEST_CASE("pooling skips NaN cells", "[view_model]") {
  trace::Map2D m = random_map(2, 2, trace::Pooling::Mean, 1);
  m.values = {1.0f, std::numeric_limits<float>::quiet_NaN(), 3.0f, std::numeric_limits<float>::quiet_NaN()};
  const trace::Map2D p = pool_by(m, 2, 2);
  CHECK(p.at(0, 0) == Approx(2.0f));
  m.values = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::quiet_NaN(),
              std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::quiet_NaN()};
  CHECK(std::isnan(pool_by(m, 2, 2).at(0, 0)));
}

TEST_CASE("cells map back to source spans", "[view_model]") {
  const trace::Map2D m = pool_by(random_map(10, 10, trace::Pooling::Max, 2), 4, 4);
  const CellSpan s = cell_span(m, 2, 1);
  CHECK(s.row_begin == 8);
  CHECK(s.row_end == 10);
  CHECK(s.col_begin == 4);
  CHECK(s.col_end == 8);
  int r = -1, c = -1;
  REQUIRE(cell_at(m, 9.5, 3.2, r, c));
  CHECK(r == 0);
  CHECK(c == 2);
  CHECK_FALSE(cell_at(m, 10.0, 0.0, r, c));
  CHECK_FALSE(cell_at(m, -0.1, 0.0, r, c));
}

TEST_CASE("difference pools both maps to a common grid", "[view_model]") {
  const trace::Map2D full_a = random_map(12, 12, trace::Pooling::Mean, 4);
  const trace::Map2D full_b = random_map(12, 12, trace::Pooling::Mean, 5);
  const trace::Map2D a = pool_by(full_a, 2, 3), b = pool_by(full_b, 3, 2);
  const trace::Map2D d = difference(a, b);
  REQUIRE(d.row_block == 6);
  REQUIRE(d.col_block == 6);
  for (int r = 0; r < d.rows; ++r)
    for (int c = 0; c < d.cols; ++c)
      CHECK(d.at(r, c) == Approx(reference_pool(full_a, r, c, 6, 6) - reference_pool(full_b, r, c, 6, 6)).margin(1e-5));
  trace::Map2D other = random_map(12, 13, trace::Pooling::Mean, 6);
  CHECK_THROWS_AS(difference(a, other), Error);
}

TEST_CASE("decode maps of runs that generated different numbers of tokens difference over what both ran",
          "[view_model]") {
  // A run that stopped two tokens early has two decode rows and two key positions fewer.
  const trace::Map2D longer = random_map(6, 20, trace::Pooling::Max, 7);
  const trace::Map2D shorter = random_map(4, 18, trace::Pooling::Max, 8);
  CHECK_THROWS_AS(difference(longer, shorter), Error);
  const trace::Map2D cut = crop_source(longer, 4, 18);
  REQUIRE(cut.source_rows == 4);
  REQUIRE(cut.source_cols == 18);
  const trace::Map2D d = difference(cut, shorter);
  REQUIRE(d.rows == 4);
  REQUIRE(d.cols == 18);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 18; ++c) CHECK(d.at(r, c) == Approx(longer.at(r, c) - shorter.at(r, c)));
  // Pooled maps keep the blocks covering the shared extent.
  const trace::Map2D pooled = pool_by(longer, 1, 4);
  const trace::Map2D pooled_cut = crop_source(pooled, 4, 18);
  CHECK(pooled_cut.cols == 5);
  CHECK(pooled_cut.rows == 4);
  CHECK(pooled_cut.at(3, 4) == pooled.at(3, 4));
}

namespace {

// A run of 6 positions (4 prompt + 2 generated), 2 layers x 1 kv head, 3 steps: prefill, decode, decode.
// Layer 0 evicts position 1 at step 0 and merges position 2 at step 2. Layer 1 evicts nothing.
trace::RunTrace synthetic_run(bool with_mask) {
  trace::RunTrace run;
  run.name = "synthetic";
  run.n_layers = 2;
  run.n_heads = 1;
  run.n_kv_heads = 1;
  run.prompt_length = 4;
  run.prompt_strings = {"a", "b", "c", "d"};
  run.generated_ids = {10, 11};
  run.generated_strings = {"e", "f"};
  run.steps = {{0, 0, 4, 0, 0, 0.0, 10}, {1, 0, 5, 0, 0, 0.0, 11}, {1, 1, 6, 0, 0, 0.0, -1}};
  trace::Event e1;
  e1.step = 0, e1.phase = 0, e1.layer = 0, e1.kv_head = 0, e1.position = 1, e1.action = trace::EventAction::Evicted;
  trace::Event e2;
  e2.step = 1, e2.phase = 1, e2.layer = 0, e2.kv_head = 0, e2.position = 2, e2.action = trace::EventAction::Merged;
  e2.merge_target = 3;
  run.events = {e1, e2};
  if (with_mask) {
    // [kv][pos][step], written out by hand from the story above.
    const uint8_t K = trace::kKept, E = trace::kEvicted, M = trace::kMergedAway;
    const auto l0 = trace::KeptMask::from_head_position_step(
        1, 6, 3, {K, K, K, /*p1*/ E, E, E, /*p2*/ K, K, M, /*p3*/ K, K, K, /*p4*/ E, K, K, /*p5*/ E, E, K});
    const auto l1 = trace::KeptMask::from_head_position_step(1, 6, 3, {K, K, K, K, K, K, K, K, K, K, K, K, E, K, K, E, E, K});
    run.kept_mask = {l0, l1};
  }
  return run;
}

}  // namespace

TEST_CASE("entry states agree whether they come from the mask or the events", "[view_model]") {
  const auto from_mask = entry_states(synthetic_run(true), 0, 0);
  const auto from_events = entry_states(synthetic_run(false), 0, 0);
  REQUIRE(from_mask.size() == 18);
  CHECK(from_mask == from_events);
  const auto S = [](EntryState s) { return static_cast<uint8_t>(s); };
  // Step 0: four prompt positions seen, position 1 evicted; positions 4, 5 not yet seen.
  CHECK(from_mask[0 * 6 + 1] == S(EntryState::Evicted));
  CHECK(from_mask[0 * 6 + 4] == S(EntryState::NotYetSeen));
  CHECK(from_mask[2 * 6 + 2] == S(EntryState::Merged));
  CHECK(from_mask[2 * 6 + 5] == S(EntryState::Kept));
}

TEST_CASE("kept sets, their difference and retention match set arithmetic", "[view_model]") {
  const trace::RunTrace run = synthetic_run(true);
  const auto k0 = kept_set(run, 0, 0), k1 = kept_set(run, 1, 0);
  CHECK(k0 == std::vector<uint8_t>{1, 0, 0, 1, 1, 1});
  CHECK(k1 == std::vector<uint8_t>{1, 1, 1, 1, 1, 1});
  CHECK(kept_set(run, 0, 0, 0) == std::vector<uint8_t>{1, 0, 1, 1, 0, 0});
  const KeptDiff d = diff_kept(k0, k1);
  std::set<int> a, b;
  for (int i = 0; i < 6; ++i) {
    if (k0[i]) a.insert(i);
    if (k1[i]) b.insert(i);
  }
  std::vector<int> both, only_a, only_b;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only_a));
  std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(only_b));
  CHECK(d.both == static_cast<int>(both.size()));
  CHECK(d.only_a == static_cast<int>(only_a.size()));
  CHECK(d.only_b == static_cast<int>(only_b.size()));
  CHECK(d.neither == 0);
  CHECK(d.jaccard == Approx(4.0 / 6.0));
  CHECK(d.state[1] == KeptDiff::OnlyB);
  CHECK(d.state[0] == KeptDiff::Both);
  const KeptDiff uneven = diff_kept({1, 1}, {1});
  CHECK(uneven.only_a == 1);
  CHECK(diff_kept({}, {}).jaccard == 1.0);
  const auto share = retention(run);
  CHECK(share == std::vector<float>{1.0f, 0.5f, 0.5f, 1.0f, 1.0f, 1.0f});
}

TEST_CASE("layer summaries and token display", "[view_model]") {
  trace::LayerHeadStat s;
  s.values = {{1.0, 2.0, 6.0}, {std::nan(""), 4.0, 4.0}};
  const LayerSummary sum = summarize_layers(s);
  CHECK(sum.mean[0] == Approx(3.0));
  CHECK(sum.min[0] == 1.0);
  CHECK(sum.max[0] == 6.0);
  CHECK(sum.mean[1] == Approx(4.0));
  CHECK(display_token(" the") == "\xC2\xB7the");
  CHECK(display_token("a\nb") == "a\\nb");
  CHECK(display_token("") == "''");
}

namespace {

// One layer, one KV head. `kept` is the set of positions held at the end of the run; every position up
// to the run's length is seen (the mask says evicted for the others).
trace::RunTrace kept_run(std::vector<int32_t> prompt, std::vector<int32_t> generated, const std::set<int>& kept) {
  trace::RunTrace run;
  run.n_layers = run.n_heads = run.n_kv_heads = 1;
  run.prompt_ids = std::move(prompt);
  run.generated_ids = std::move(generated);
  run.prompt_length = static_cast<int>(run.prompt_ids.size());
  const int n = run.prompt_length + run.n_generated();
  run.steps.push_back({0, 0, run.prompt_length, 0, 0, 0.0, -1});
  for (int g = 1; g <= run.n_generated(); ++g) run.steps.push_back({1, g - 1, run.prompt_length + g, 0, 0, 0.0, -1});
  std::vector<uint8_t> values;  // [kv_head][position][step]
  for (int p = 0; p < n; ++p)
    for (int s = 0; s < run.n_steps(); ++s) values.push_back(kept.count(p) ? trace::kKept : trace::kEvicted);
  run.kept_mask = {trace::KeptMask::from_head_position_step(1, n, run.n_steps(), values)};
  return run;
}

}  // namespace

TEST_CASE("kept sets compare only positions that hold the same token in both runs", "[view_model]") {
  // The case in small: a full run that stopped after two tokens against a compressing run that
  // went on, agreed on the first generated token and then chose differently, and at its end keeps
  // mostly its own generated tokens. Comparing all positions would call those "only this".
  const std::vector<int32_t> prompt = {11, 12, 13, 14, 15, 16};
  const trace::RunTrace full = kept_run(prompt, {7, 8}, {0, 1, 2, 3, 4, 5, 6, 7});
  const trace::RunTrace small = kept_run(prompt, {7, 20, 21, 22}, {0, 3, 6, 8, 9});
  const ComparableSpan span = comparable_span(full, small);
  CHECK(span.prompt == 6);
  CHECK(span.generated == 1);  // 7 agrees, then 8 against 20

  auto expect = [](const std::set<int>& a, const std::set<int>& b, int length, const KeptDiff& d) {
    std::set<int> ra, rb, both, only_a, only_b, uni;
    for (int p : a)
      if (p < length) ra.insert(p);
    for (int p : b)
      if (p < length) rb.insert(p);
    std::set_intersection(ra.begin(), ra.end(), rb.begin(), rb.end(), std::inserter(both, both.end()));
    std::set_difference(ra.begin(), ra.end(), rb.begin(), rb.end(), std::inserter(only_a, only_a.end()));
    std::set_difference(rb.begin(), rb.end(), ra.begin(), ra.end(), std::inserter(only_b, only_b.end()));
    std::set_union(ra.begin(), ra.end(), rb.begin(), rb.end(), std::inserter(uni, uni.end()));
    CHECK(d.both == static_cast<int>(both.size()));
    CHECK(d.only_a == static_cast<int>(only_a.size()));
    CHECK(d.only_b == static_cast<int>(only_b.size()));
    CHECK(d.neither == length - static_cast<int>(uni.size()));
    CHECK(d.state.size() == static_cast<std::size_t>(length));
    CHECK(d.jaccard == Approx(static_cast<double>(both.size()) / uni.size()));
  };
  const KeptDiff prompt_only = diff_kept_over(full, small, 0, 0, span.length(false));
  expect({0, 1, 2, 3, 4, 5, 6, 7}, {0, 3, 6, 8, 9}, 6, prompt_only);
  CHECK(prompt_only.both == 2);  // positions 0 and 3
  const KeptDiff with_generated = diff_kept_over(full, small, 0, 0, span.length(true));
  expect({0, 1, 2, 3, 4, 5, 6, 7}, {0, 3, 6, 8, 9}, 7, with_generated);
  CHECK(with_generated.both == 3);  // and 6, the agreed token

  CHECK(compared_positions(span, false) == "prompt positions 0..5");
  CHECK(compared_positions(span, true) == "prompt positions 0..5 + 1 generated token both runs agree on");
  CHECK(compared_positions(ComparableSpan{6, 0}, true) ==
        "prompt positions 0..5 (the generated tokens differ from the first)");

  // Different prompts: only their common prefix, and no generated position even if the ids agree.
  const trace::RunTrace other = kept_run({11, 12, 99, 14}, {7, 8}, {0, 1, 2, 3, 4, 5});
  CHECK(comparable_span(full, other).prompt == 2);
  CHECK(comparable_span(full, other).generated == 0);
  // Identical runs: everything compares, and a run that stopped earlier counts as not keeping the rest.
  CHECK(comparable_span(small, small).length(true) == 10);
  const KeptDiff past_end = diff_kept_over(full, small, 0, 0, 10);
  expect({0, 1, 2, 3, 4, 5, 6, 7}, {0, 3, 6, 8, 9}, 10, past_end);
}

TEST_CASE("similarity fit range comes from the cells off the diagonal", "[similarity]") {
  // 4 x 4 cosines: 1 on the diagonal, 0.40 .. 0.95 elsewhere (symmetric).
  trace::Map2D m;
  m.rows = m.cols = m.source_rows = m.source_cols = 4;
  m.values = {1.0f, 0.40f, 0.60f, 0.70f,  //
              0.40f, 1.0f, 0.95f, 0.50f,  //
              0.60f, 0.95f, 1.0f, 0.80f,  //
              0.70f, 0.50f, 0.80f, 1.0f};
  ColorScale s = off_diagonal_range(m);
  CHECK(s.vmin == Approx(0.40f));
  CHECK(s.vmax == Approx(0.95f));
  // Pooled 2 x 2 (max): cells (0,0) and (1,1) contain the diagonal and are left out; both off-diagonal blocks hold
  // max(0.60, 0.70, 0.95, 0.50) = 0.95: one value, no range to fit, so the full [-1, 1].
  m.pooling = trace::Pooling::Max;
  s = off_diagonal_range(pool_by(m, 2, 2));
  CHECK(s.vmin == -1.0f);
  CHECK(s.vmax == 1.0f);
}

TEST_CASE("first_divergent_token: the first differing generated token of two runs of one prompt") {
  trace::RunTrace a, b;
  a.prompt_ids = b.prompt_ids = {5, 6, 7};
  a.generated_ids = {1, 2, 3, 4};
  b.generated_ids = {1, 2, 9, 4};
  CHECK(viewers::first_divergent_token(a, b) == 2);
  CHECK(viewers::first_divergent_token(b, a) == 2);
  b.generated_ids = {1, 2};  // stopped earlier, no token differs while both generate
  CHECK(viewers::first_divergent_token(a, b) == -1);
  b.generated_ids = {8};
  CHECK(viewers::first_divergent_token(a, b) == 0);
  b.prompt_ids = {5, 6};  // other prompts: nothing comparable
  CHECK(viewers::first_divergent_token(a, b) == -1);
  CHECK(viewers::first_divergent_token(a, a) == -1);
}

TEST_CASE("the eviction timeline ends at the last position a run reached, not at its reserved length", "[view_model]") {
  // synthetic_run's 6 positions, recorded with room for 4 more new tokens that never came (an early stop).
  trace::RunTrace run = synthetic_run(true);
  const uint8_t K = trace::kKept, E = trace::kEvicted, M = trace::kMergedAway;
  const uint8_t reached[18] = {K, K, K, E, E, E, K, K, M, K, K, K, E, K, K, E, E, K};
  std::vector<uint8_t> l0(10 * 3, E);  // positions 6..9: never processed
  for (int i = 0; i < 18; ++i) l0[i] = reached[i];
  run.kept_mask = {trace::KeptMask::from_head_position_step(1, 10, 3, l0),
                   trace::KeptMask::from_head_position_step(1, 10, 3, std::vector<uint8_t>(30, K))};
  for (const bool aggregate : {false, true}) {
    HeatmapPlot plot;
    std::string why;
    REQUIRE(timeline_plot(run, 0, 0, aggregate, plot, why));
    CHECK(plot.map.cols == 6);
    CHECK(plot.map.source_cols == 6);
    CHECK(plot.map.rows == 3);
    REQUIRE(plot.map.values.size() == 18);
  }
  HeatmapPlot states;
  std::string why;
  REQUIRE(timeline_plot(run, 0, 0, false, states, why));
  const auto S = [](EntryState s) { return static_cast<float>(s); };
  CHECK(states.map.values[2 * 6 + 2] == S(EntryState::Merged));  // step 2, position 2, as in the uncropped states
  CHECK(states.map.values[0 * 6 + 4] == S(EntryState::NotYetSeen));
}

TEST_CASE("Compare's columns follow the shared layer and head while linked", "[view_model]") {
  AppState state;
  auto add = [&](const std::string& name, int layers, int heads) {
    auto run = std::make_shared<trace::RunTrace>();
    run->name = name;
    run->n_layers = layers;
    run->n_heads = heads;
    run->n_kv_heads = 1;
    run->prompt_ids = {1, 2, 3};
    RunEntry e;
    e.run = run;
    e.slot = name;
    state.runs.push_back(e);
  };
  add("full", 30, 9);
  add("snapkv_b25pct", 30, 9);
  add("other_model", 12, 4);  // a smaller model: its column is clamped to its own shape
  state.active = 1;
  state.compare_auto = false;
  state.compare = {0, 1, 2};
  state.sel.layer = 14, state.sel.head = 3;
  auto column = [&](std::size_t i) { return std::pair{state.compare_sel[i].layer, state.compare_sel[i].head}; };

  CompareView view;
  view.sync(state);  // what drawing the panel, or exporting it before it was ever drawn, does first
  REQUIRE(state.compare_sel.size() == 3);
  CHECK(column(0) == std::pair{14, 3});
  CHECK(column(1) == std::pair{14, 3});
  CHECK(column(2) == std::pair{11, 3});
  // The shared selection moves (another panel's slider, a script's `layer`): every column follows.
  state.sel.layer = 20, state.sel.head = 8;
  view.sync(state);
  CHECK(column(0) == std::pair{20, 8});
  CHECK(column(1) == std::pair{20, 8});
  CHECK(column(2) == std::pair{11, 3});
  // Unlinked, a column keeps its own choice and the shared selection does not move it.
  std::vector<RunShape> shapes;
  for (int i : state.compare) shapes.push_back(shape_of(*state.run(i)));
  state.compare_sel.linked = false;
  state.compare_sel.set_layer(1, 2, shapes);
  state.sel.layer = 5;
  view.sync(state);
  CHECK(column(0) == std::pair{20, 8});
  CHECK(column(1) == std::pair{2, 8});
  // Linked again: back on the shared selection.
  state.compare_sel.linked = true;
  view.sync(state);
  CHECK(column(0) == std::pair{5, 8});
  CHECK(column(1) == std::pair{5, 8});
  CHECK(column(2) == std::pair{5, 3});
}
