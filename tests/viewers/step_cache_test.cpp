// The cache at any step (viewers/step_cache.h) and what the attention panel shows for a selected step, on real
// runs of the default model, against a replay written here of the recorded events: start empty, add the
// positions each step processed, remove the entries the events of that step name. Two policies: SnapKV evicts
// once at the end of prefill; H2O with a small budget also evicts at every decode step (decode_evict=true).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "tests/support/lighthouse_trace.h"
#include "viewers/attention_heatmap.h"
#include "viewers/step_cache.h"
#include "viewers/view_model.h"

using namespace kvscope;
using namespace kvscope::viewers;

namespace {

std::shared_ptr<const trace::RunTrace> record(const std::string& policy, const std::string& budget) {
  return test::record_lighthouse_run(policy, budget);
}

// The replay: what (layer, kv head) holds at the end of every step row, and what left it, from the events alone.
struct Replayed {
  std::vector<std::set<int>> kept, evicted, merged;  // [step row]
};

Replayed replay(const trace::RunTrace& run, int layer, int kv_head) {
  int prefill_rows = 0;  // events count decode steps from 0: their row is after every prefill block
  for (const auto& s : run.steps) prefill_rows += s.phase == 0;
  std::map<int, std::vector<const trace::Event*>> by_row;
  for (const auto& e : run.events)
    if (e.layer == layer && e.kv_head == kv_head) by_row[e.phase == 0 ? e.step : prefill_rows + e.step].push_back(&e);
  Replayed out;
  std::set<int> cache, evicted, merged;
  int processed = 0;
  for (int row = 0; row < run.n_steps(); ++row) {
    for (; processed < run.steps[row].seq_len; ++processed) cache.insert(processed);
    for (const trace::Event* e : by_row[row]) {
      cache.erase(e->position);
      (e->action == trace::EventAction::Merged ? merged : evicted).insert(e->position);
    }
    out.kept.push_back(cache);
    out.evicted.push_back(evicted);
    out.merged.push_back(merged);
  }
  return out;
}

std::set<int> positions_in(const std::vector<uint8_t>& states, EntryState which) {
  std::set<int> out;
  for (int p = 0; p < static_cast<int>(states.size()); ++p)
    if (states[p] == static_cast<uint8_t>(which)) out.insert(p);
  return out;
}

void check_every_step(const trace::RunTrace& run, bool expect_decode_evictions) {
  int decode_events = 0;
  for (const auto& e : run.events) decode_events += e.phase == 1;
  INFO("run " << run.name << ": " << run.events.size() << " events, " << decode_events << " in decode steps");
  REQUIRE(!run.events.empty());
  if (expect_decode_evictions) REQUIRE(decode_events > 0);
  else REQUIRE(decode_events == 0);
  const RunShape shape = shape_of(run);
  for (int layer : {0, run.n_layers / 2, run.n_layers - 1})
    for (int head = 0; head < run.n_heads; head += run.n_heads / run.n_kv_heads) {
      const int kv = kv_head_of(head, shape);
      const Replayed expected = replay(run, layer, kv);
      for (int step = 0; step < run.n_steps(); ++step) {
        INFO("layer " << layer << ", kv head " << kv << ", step row " << step);
        // The cache at the step.
        const StepCache cache = cache_at_step(run, layer, kv, step);
        REQUIRE(cache.step == step);
        REQUIRE(cache.seq_len == run.steps[step].seq_len);
        CHECK(positions_in(cache.states, EntryState::Kept) == expected.kept[step]);
        CHECK(positions_in(cache.states, EntryState::Evicted) == expected.evicted[step]);
        CHECK(positions_in(cache.states, EntryState::Merged) == expected.merged[step]);
        CHECK(cache.kept == static_cast<int>(expected.kept[step].size()));

        // What the attention panel draws for that step: the key-mark strip under the decode map (every position),
        // and the decode map's blank cells (keys the decode query did not attend to).
        Selection sel{layer, head, step};
        HeatmapPlot plot;
        std::string why;
        REQUIRE(attention_plot(run, sel, true, true, ScaleKind::Log, Colormap::Viridis, 4096, plot, why));
        for (int p = 0; p < static_cast<int>(plot.column_marks.size()); ++p) {
          const uint8_t want = expected.kept[step].count(p) ? 0 : expected.evicted[step].count(p) ? 1
                               : expected.merged[step].count(p) ? 2 : 3;
          INFO("position " << p);
          CHECK(plot.column_marks[p] == want);
        }
        const trace::StepStats& st = run.steps[step];
        if (st.phase != 1 || st.step >= plot.map.rows || step == 0) continue;
        // Decode step t is map row t; its query (position seq_len - 1) attended to the cache at the end of the step
        // before and to itself.
        REQUIRE(plot.map.full_resolution());
        const int query = st.seq_len - 1;
        std::set<int> attended = expected.kept[step - 1];
        attended.insert(query);
        for (int k = 0; k < plot.map.cols; ++k) {
          INFO("decode step " << st.step << ", key " << k);
          CHECK(std::isnan(plot.map.at(st.step, k)) == (attended.count(k) == 0));
        }
      }
    }
}

}  // namespace

TEST_CASE("the cache at every step equals a replay of the events: SnapKV (prefill-time)", "[viewers][model][step]") {
  const auto run = record("snapkv", "48");
  check_every_step(*run, false);
}

TEST_CASE("the cache at every step equals a replay of the events: H2O evicting at every decode step", "[viewers][model][step]") {
  const auto run = record("h2o", "24");
  check_every_step(*run, true);
}

TEST_CASE("a step selection of -1 or past the end shows the last step", "[viewers][step]") {
  trace::RunTrace run;
  for (int i = 0; i < 3; ++i) run.steps.push_back({});
  CHECK(resolve_step(run, -1) == 2);
  CHECK(resolve_step(run, 7) == 2);
  CHECK(resolve_step(run, 1) == 1);
  run.steps.clear();
  CHECK(resolve_step(run, -1) == -1);
}
