#include "viewers/budget_plot.h"

#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <cmath>

#include "viewers/layer_types.h"

namespace kvscope::viewers {

std::vector<std::string> layer_series_names(const trace::RunTrace& run) {
  std::vector<std::string> names;
  for (const auto& [name, s] : run.policy_series)
    if (std::find(s.dims.begin(), s.dims.end(), "layer") != s.dims.end() && !s.values.empty()) names.push_back(name);
  return names;
}

std::vector<LineSeries> series_lines(const policy::Series& s, int max_lines) {
  std::vector<LineSeries> out;
  if (s.shape.size() == 1) {
    LineSeries line;
    line.name = "value";
    line.kind = LineSeries::Kind::Bars;
    for (int l = 0; l < s.shape[0] && l < static_cast<int>(s.values.size()); ++l) {
      line.x.push_back(l);
      line.y.push_back(s.values[l]);
    }
    out.push_back(std::move(line));
    return out;
  }
  if (s.shape.size() != 2) return out;
  const int rows = s.shape[0], cols = s.shape[1];
  const bool layer_last = s.dims.size() == 2 && s.dims[1] == "layer";
  const int n_lines = layer_last ? rows : cols;
  const int n_layers = layer_last ? cols : rows;
  const std::string dim = s.dims.size() == 2 ? (layer_last ? s.dims[0] : s.dims[1]) : "row";
  std::vector<int> pick;
  if (n_lines <= max_lines) {
    for (int i = 0; i < n_lines; ++i) pick.push_back(i);
  } else {
    for (int k = 0; k < max_lines; ++k) pick.push_back(static_cast<int>(std::lround(k * (n_lines - 1.0) / (max_lines - 1))));
    pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
  }
  for (int i : pick) {
    LineSeries line;
    line.name = dim + " " + std::to_string(i);
    line.color = i;
    for (int l = 0; l < n_layers; ++l) {
      const std::size_t idx = layer_last ? static_cast<std::size_t>(i) * cols + l : static_cast<std::size_t>(l) * cols + i;
      if (idx >= s.values.size()) break;
      line.x.push_back(l);
      line.y.push_back(s.values[idx]);
    }
    out.push_back(std::move(line));
  }
  return out;
}

LinePlot BudgetPlot::build(const AppState& state) const {
  LinePlot plot;
  const trace::RunTrace* active = state.active_run();
  if (!active) return plot;
  plot.x_label = "layer";
  plot.integer_x = true;
  if (series.empty()) {
    plot.title = "Prompt budget per layer";
    plot.y_label = "tokens per KV head";
    std::vector<int> idx;
    for (int i = 0; i < static_cast<int>(state.runs.size()); ++i) {
      const trace::RunTrace* r = state.run(i);
      // A full cache's "budget" is the whole prompt; it would only stretch the axis.
      if (r && r->n_layers == active->n_layers && !r->layer_budgets.empty() && r->meta("policy") != "full") idx.push_back(i);
    }
    const double width = 0.84 / std::max<std::size_t>(1, idx.size());
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const trace::RunTrace* r = state.run(idx[k]);
      LineSeries s;
      s.name = state.run_name(idx[k]);
      s.kind = LineSeries::Kind::Bars;
      s.bar_width = width;
      s.color = idx[k];
      for (std::size_t l = 0; l < r->layer_budgets.size(); ++l) {
        s.x.push_back(l - 0.42 + width * (k + 0.5));
        s.y.push_back(r->layer_budgets[l]);
      }
      plot.series.push_back(std::move(s));
    }
    // What a sliding-window layer holds whatever the policy: its window, drawn over those layers' bars.
    LineSeries window;
    window.name = "window (sliding-window layers)";
    window.kind = LineSeries::Kind::Markers;
    window.color = static_cast<int>(state.runs.size());
    for (int l = 0; l < active->n_layers; ++l)
      if (active->layer_window(l) > 0) {
        window.x.push_back(l);
        window.y.push_back(active->layer_window(l));
      }
    if (!window.x.empty() && !plot.series.empty()) plot.series.push_back(std::move(window));
    // Cascading allocations (CAKE) re-plan the budgets at every prefill stage: the stages of the
    // active run are drawn over the bars, so the final bar is seen as the end of that path.
    for (const auto& [name, ser] : active->policy_series) {
      if (ser.dims.size() != 2 || ser.dims[0] != "stage" || ser.dims[1] != "layer" || name.find("budget") == std::string::npos)
        continue;
      auto lines = series_lines(ser, 4);
      for (std::size_t k = 0; k < lines.size(); ++k) {
        lines[k].name = active->name + " " + lines[k].name;
        int finite = 0;
        for (double& v : lines[k].y) {
          if (v < 0) v = std::nan("");  // -1 marks layers a stage has not allocated yet
          else ++finite;
        }
        lines[k].color = static_cast<int>(state.runs.size() + k);
        if (finite >= 2) plot.series.push_back(std::move(lines[k]));  // a lone point draws nothing
      }
    }
  } else if (auto it = active->policy_series.find(series); it != active->policy_series.end()) {
    plot.title = active->name + ": " + series;
    plot.y_label = series;
    plot.series = series_lines(it->second);
  }
  plot.marks_x.push_back(state.sel.layer);
  mark_layer_types(*active, plot);
  // The window's markers sit on the bars' tops, where a legend inside the plot would cover them.
  plot.legend_outside = plot.series.size() > (plot.x_tick_labels.empty() ? 3 : 2);
  return plot;
}

const LayerBudgetReport& BudgetPlot::report(const std::shared_ptr<const trace::RunTrace>& run) {
  std::erase_if(reports_, [](const auto& kv) { return kv.first.use_count() == 1; });  // runs no longer shown
  auto it = reports_.find(run);
  if (it == reports_.end()) it = reports_.emplace(run, layer_budget_report(*run)).first;
  return it->second;
}

void BudgetPlot::draw_decode_growth(const AppState& state) {
  // The bars are the prompt budget; what decode added on top is named per run, so a policy that appends
  // generated tokens is not mistaken for one with a larger budget.
  std::string lines;
  for (int i = 0; i < static_cast<int>(state.runs.size()); ++i) {
    const RunEntry& e = state.runs[i];
    if (!e.run || e.in_progress || !e.run->complete || e.run->layer_budgets.empty() || e.run->meta("policy") == "full")
      continue;
    const std::string growth = decode_growth_text(report(e.run));
    if (!growth.empty()) lines += (lines.empty() ? "" : ", ") + state.run_name(i) + " " + growth;
  }
  if (!lines.empty()) ImGui::TextWrapped("Bars: the prompt budget. Decode tokens also held at the end: %s", lines.c_str());
}

void BudgetPlot::draw(AppState& state) {
  const trace::RunTrace* active = state.active_run();
  if (!active) {
    centered_hint("No run yet.");
    return;
  }
  const auto names = layer_series_names(*active);
  if (!series.empty() && std::find(names.begin(), names.end(), series) == names.end()) series.clear();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 16);
  if (ImGui::BeginCombo("series", series.empty() ? "prompt budgets (all runs)" : series.c_str())) {
    if (ImGui::Selectable("prompt budgets (all runs)", series.empty())) series.clear();
    for (const auto& n : names) {
      if (ImGui::Selectable(n.c_str(), n == series)) series = n;
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", active->policy_series.at(n).description.c_str());
    }
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  ImGui::TextDisabled("%s", names.empty() ? "(this policy exposes no per-layer series)" : "");
  ImGui::SameLine();
  export_button(state, key());
  if (series.empty()) draw_decode_growth(state);
  if (const std::string types = layer_types_text(*active); !types.empty())
    ImGui::TextWrapped("%s: they hold at most their window whatever the budget (the policy's swa= mode says what it "
                       "does there).", types.c_str());
  const LinePlot plot = build(state);
  if (plot.series.empty()) {
    // A run in progress has no prompt budgets yet; "none" would flip back to bars when it ends.
    const bool running = state.runs[state.active].in_progress || !active->complete;
    centered_hint(running ? "running... the per-layer budgets appear when the run ends."
                          : "No per-layer budgets: the full cache and fixed-budget policies give every layer the same budget.");
    return;
  }
  int clicked = -1;
  draw_line_plot("budget", plot, ImGui::GetContentRegionAvail(), [&] {
    if (plot_clicked()) clicked = static_cast<int>(std::lround(ImPlot::GetPlotMousePos().x));
  });
  if (clicked >= 0) state.sel = clamp(Selection{clicked, state.sel.head, state.sel.step}, shape_of(*active));
}

Figure BudgetPlot::figure(const AppState& state) {
  Figure f;
  f.title = "budget";
  LinePlot p = build(state);
  p.marks_x.clear();
  if (!p.series.empty()) f.parts.push_back(std::move(p));
  return f;
}

}  // namespace kvscope::viewers
