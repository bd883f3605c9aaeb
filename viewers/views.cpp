#include "viewers/views.h"

#include <algorithm>

#include "core/common/error.h"
#include "viewers/attention_heatmap.h"
#include "viewers/budget_plot.h"
#include "viewers/compare_view.h"
#include "viewers/eviction_timeline.h"
#include "viewers/evidence_view.h"
#include "viewers/layer_stats_plot.h"
#include "viewers/router_map.h"
#include "viewers/script.h"
#include "viewers/similarity_map.h"
#include "viewers/summary.h"
#include "viewers/token_strip.h"

namespace kvscope::viewers {

std::vector<std::unique_ptr<Panel>> make_view_panels() {
  std::vector<std::unique_ptr<Panel>> panels;
  panels.push_back(std::make_unique<AttentionHeatmap>());
  panels.push_back(std::make_unique<SimilarityMap>());
  panels.push_back(std::make_unique<CompareView>());
  panels.push_back(std::make_unique<LayerStatsPlot>());
  panels.push_back(std::make_unique<BudgetPlot>());
  panels.push_back(std::make_unique<EvictionTimeline>());
  panels.push_back(std::make_unique<TokenStrip>());
  panels.push_back(std::make_unique<Summary>());
  panels.push_back(std::make_unique<RouterMap>());
  return panels;
}

std::pair<int, int> parse_position_range(const std::string& option, const std::string& text) {
  const auto colon = text.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument(text);
    std::size_t used_a = 0, used_b = 0;
    const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
    const int first = std::stoi(a, &used_a), end = std::stoi(b, &used_b);
    if (used_a != a.size() || used_b != b.size()) throw std::invalid_argument(text);
    return {first, end};
  } catch (const std::exception&) {
    throw UsageError(option + " takes positions A:B (A included, B excluded, e.g. 2760:2800), not '" + text + "'");
  }
}

Figure view_figure(AppState& state, const std::string& view, const ViewOptions& o) {
  const trace::RunTrace* run = state.active_run();
  if (!run) throw Error("no run to draw");
  state.sel = clamp(Selection{o.layer, o.head, o.step}, shape_of(*run));
  if (state.sel.layer != o.layer || state.sel.head != o.head)
    throw UsageError("run '" + run->name + "' has " + std::to_string(run->n_layers) + " layers and " +
                     std::to_string(run->n_heads) + " heads; layer " + std::to_string(o.layer) + ", head " +
                     std::to_string(o.head) + " is out of range");
  state.token = o.token;
  state.scale = o.scale;
  state.cmap = o.cmap;
  Figure f;
  if (view == "attention" && (o.queries || o.keys)) {
    if (o.decode) throw UsageError("--queries/--keys take positions, decode rows included (from the prompt length on); drop --decode");
    const trace::ExactAttention exact(*run, o.layer, o.head);  // refuses a run without q/k, naming the option
    // One range alone: the other axis over what can be non-zero (keys up to the last query; queries from the
    // first key on).
    const auto [q0, q1] = o.queries.value_or(std::pair{o.keys ? std::max(0, o.keys->first) : 0, exact.n_queries()});
    const auto [k0, k1] = o.keys.value_or(std::pair{0, std::min(std::max(1, q1), exact.n_keys())});
    f.title = "attention";
    f.parts.push_back(exact_attention_plot(*run, state.sel, q0, q1, k0, k1, o.max_rows, o.max_cols, o.scale, o.cmap));
  } else if (view == "attention") {
    AttentionHeatmap p;
    p.decode = o.decode;
    f = p.figure(state);
    if (f.empty()) {
      HeatmapPlot unused;
      std::string why;
      attention_plot(*run, state.sel, o.decode, true, o.scale, o.cmap, 1024, unused, why);
      throw Error(why);
    }
  } else if (view == "similarity") {
    SimilarityMap p;
    p.values = o.values;
    p.kv_head = o.kv_head;
    f = p.figure(state);
    if (f.empty()) {
      HeatmapPlot unused;
      std::string why;
      similarity_plot(*run, o.layer, o.kv_head, o.values, false, 1024, unused, why);
      throw Error(why);
    }
  } else if (view == "timeline") {
    EvictionTimeline p;
    p.kv_head = o.kv_head;
    p.aggregate = o.aggregate;
    f = p.figure(state);
  } else if (view == "layer_stats") {
    LayerStatsPlot p;
    p.stat = o.stat;
    if (p.stat.empty()) {
      std::vector<const trace::RunTrace*> runs;
      for (const auto& e : state.runs) runs.push_back(e.run.get());
      const auto names = layer_stat_names(runs);
      if (names.empty()) throw Error("run '" + run->name + "' has no per-layer statistics");
      p.stat = default_layer_stat(names);
    }
    f = p.figure(state);
    if (f.empty()) throw Error("no run has the statistic '" + p.stat + "'");
  } else if (view == "budget") {
    BudgetPlot p;
    p.series = o.series;
    if (!o.series.empty() && !run->policy_series.count(o.series))
      throw UsageError("run '" + run->name + "' has no diagnostic series '" + o.series + "'");
    f = p.figure(state);
    if (f.empty()) throw Error("run '" + run->name + "' has no per-layer budgets");
  } else if (view == "evidence") {
    if (!o.evidence)
      throw Error("run '" + run->name +
                  "' has no evidence/ group: the evidence view needs a trace written by `eval ... --traces DIR` "
                  "(docs/trace-format.md)");
    f = evidence_figure(*run, *o.evidence, o.first_answer_step);
  } else if (view == "router") {
    RouterMap p;
    f = p.figure(state);
    if (f.empty()) {
      HeatmapPlot unused;
      std::string why;
      router_weights_plot(*run, o.layer, unused, why);
      throw Error(why);
    }
  } else if (view == "summary") {
    Summary p;
    f = p.figure(state);
  } else if (view == "compare") {
    state.compare_auto = false;
    state.compare.clear();
    for (const auto& name : o.runs) {
      auto it = std::find_if(state.runs.begin(), state.runs.end(), [&](const RunEntry& e) { return e.run->name == name; });
      if (it == state.runs.end()) throw UsageError("no run named '" + name + "' in the trace");
      state.compare.push_back(static_cast<int>(it - state.runs.begin()));
    }
    if (state.compare.empty())
      for (int i = 0; i < static_cast<int>(state.runs.size()) && i < 4; ++i) state.compare.push_back(i);
    if (state.compare.size() < 2) throw Error("compare needs two runs; the trace has " + std::to_string(state.runs.size()));
    state.compare_sel.resize(state.compare.size());
    std::vector<RunShape> shapes;
    for (int i : state.compare) shapes.push_back(shape_of(*state.run(i)));
    state.compare_sel.linked = true;
    state.compare_sel.set_layer(0, o.layer, shapes);
    state.compare_sel.set_head(0, o.head, shapes);
    CompareView p;
    p.decode = o.decode;
    f = p.figure(state);
  } else {
    std::string valid;
    for (const char* v : kPanelNames)
      if (std::string(v) != "setup" && std::string(v) != "tokens" && std::string(v) != "quality" &&
          std::string(v) != "samples")
        valid += (valid.empty() ? "" : ", ") + std::string(v);
    valid += ", evidence";
    throw UsageError("unknown view '" + view + "' (valid: " + valid + ")");
  }
  if (f.empty()) throw Error("view '" + view + "' has nothing to draw for run '" + run->name + "'");
  return f;
}

}  // namespace kvscope::viewers
