#include "viewers/layer_stats_plot.h"

#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <cmath>

#include "core/analysis/router_load.h"
#include "viewers/layer_types.h"

namespace kvscope::viewers {

std::vector<std::string> layer_stat_names(const std::vector<const trace::RunTrace*>& runs) {
  std::vector<std::string> names;
  auto add = [&](const std::string& n) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  };
  for (const auto* r : runs)
    for (const auto& [n, s] : r->stats) add(n);
  for (const auto* r : runs)
    for (const auto& [n, s] : r->layer_stats) add(n);
  for (const auto* r : runs)
    if (!r->layer_budgets.empty()) add("layer_budget");
  for (const auto* r : runs)
    if (!r->routing.empty()) add("router_load_entropy");
  return names;
}

bool layer_stat_series(const trace::RunTrace& run, const std::string& name, bool band, LineSeries& out,
                       std::string* description) {
  out = LineSeries{};
  out.name = run.name;
  if (name == "layer_budget") {
    if (run.layer_budgets.empty()) return false;
    for (std::size_t l = 0; l < run.layer_budgets.size(); ++l) {
      out.x.push_back(static_cast<double>(l));
      out.y.push_back(run.layer_budgets[l]);
    }
    if (description) *description = "tokens per (layer, KV head) the policy allocated, at the end of the run";
    return true;
  }
  if (name == "router_load_entropy") {
    const std::vector<double> entropy = analysis::router_load_entropy(run);
    if (entropy.empty()) return false;
    for (std::size_t l = 0; l < entropy.size(); ++l) out.x.push_back(static_cast<double>(l));
    out.y = entropy;
    if (description)
      *description = "bits: entropy of the share of the router's top-k choices each expert took, over every token the "
                     "run fed (log2 of the expert count: perfectly even; 0: one expert took all)";
    return true;
  }
  if (const trace::LayerHeadStat* s = run.stat(name)) {
    const LayerSummary sum = summarize_layers(*s);
    for (std::size_t l = 0; l < sum.mean.size(); ++l) out.x.push_back(static_cast<double>(l));
    out.y = sum.mean;
    if (band) {
      out.y_low = sum.min;
      out.y_high = sum.max;
    }
    if (description) *description = s->description + "  (line: mean over heads; band: min..max)";
    return true;
  }
  if (const trace::LayerStat* s = run.layer_stat(name)) {
    for (std::size_t l = 0; l < s->values.size(); ++l) out.x.push_back(static_cast<double>(l));
    out.y = s->values;
    if (description) *description = s->description;
    return true;
  }
  return false;
}

std::string default_layer_stat(const std::vector<std::string>& names) {
  // Row entropy is the statistic every paper starts from; budgets make sense for every policy run.
  for (const char* preferred : {"mean_row_entropy", "cake_window_entropy", "layer_budget"})
    if (std::find(names.begin(), names.end(), preferred) != names.end()) return preferred;
  return names.empty() ? std::string() : names.front();
}

LinePlot LayerStatsPlot::build(const AppState& state) const {
  LinePlot plot;
  const trace::RunTrace* active = state.active_run();
  if (!active) return plot;
  plot.x_label = "layer";
  plot.integer_x = true;
  plot.y_label = stat;
  plot.title = stat + " per layer";
  mark_layer_types(*active, plot);
  for (int i = 0; i < static_cast<int>(state.runs.size()); ++i) {
    const trace::RunTrace* r = state.run(i);
    if (!r || (!all_runs && i != state.active) || r->n_layers != active->n_layers) continue;
    LineSeries s;
    if (!layer_stat_series(*r, stat, bands, s)) continue;
    s.color = i;
    if (stat == "layer_budget") s.kind = LineSeries::Kind::Stairs;
    plot.series.push_back(std::move(s));
  }
  plot.marks_x.push_back(state.sel.layer);
  return plot;
}

void LayerStatsPlot::draw(AppState& state) {
  std::vector<const trace::RunTrace*> runs;
  for (const auto& e : state.runs)
    if (e.run) runs.push_back(e.run.get());
  const auto names = layer_stat_names(runs);
  if (names.empty()) {
    centered_hint("No per-layer statistics yet (they are recorded at the end of prefill).");
    return;
  }
  if (std::find(names.begin(), names.end(), stat) == names.end()) stat = default_layer_stat(names);
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 16);
  if (ImGui::BeginCombo("statistic", stat.c_str())) {
    for (const auto& n : names)
      if (ImGui::Selectable(n.c_str(), n == stat)) stat = n;
    ImGui::EndCombo();
  }
  if (const trace::RunTrace* r = state.active_run()) {
    LineSeries tmp;
    std::string desc;
    if (layer_stat_series(*r, stat, false, tmp, &desc) && ImGui::IsItemHovered() && !desc.empty()) {
      ImGui::BeginTooltip();
      ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30);
      ImGui::TextUnformatted(desc.c_str());
      ImGui::PopTextWrapPos();
      ImGui::EndTooltip();
    }
  }
  ImGui::SameLine();
  ImGui::Checkbox("all runs", &all_runs);
  ImGui::SameLine();
  ImGui::Checkbox("head band", &bands);
  ImGui::SameLine();
  export_button(state, key());
  const LinePlot plot = build(state);
  int clicked = -1;
  draw_line_plot("layer_stats", plot, ImGui::GetContentRegionAvail(), [&] {
    if (plot_clicked()) clicked = static_cast<int>(std::lround(ImPlot::GetPlotMousePos().x));
  });
  if (clicked >= 0) {
    if (const trace::RunTrace* r = state.active_run()) state.sel = clamp(Selection{clicked, state.sel.head, state.sel.step}, shape_of(*r));
  }
}

Figure LayerStatsPlot::figure(const AppState& state) {
  Figure f;
  f.title = "layer_stats";
  LinePlot p = build(state);
  p.marks_x.clear();
  if (!p.series.empty()) f.parts.push_back(std::move(p));
  return f;
}

}  // namespace kvscope::viewers
