#include "viewers/router_map.h"

#include <imgui.h>
#include <implot.h>

#include <cmath>
#include <cstdio>

#include "core/analysis/router_agreement.h"
#include "viewers/summary.h"

namespace kvscope::viewers {

namespace {

std::string pointer_signature(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

}  // namespace

bool router_weights_plot(const trace::RunTrace& run, int layer, HeatmapPlot& out, std::string& why) {
  trace::Map2D m = analysis::router_weights(run, layer);
  if (m.empty()) {
    why = "run '" + run.name + "' has no router choices (a dense model, or a trace without router_experts)";
    return false;
  }
  out = HeatmapPlot{};
  out.map = std::move(m);
  out.scale = {ScaleKind::Linear, 0.0f, 1.0f};
  out.cmap = Colormap::Viridis;
  out.title = run.name + ": router weights, layer " + std::to_string(layer) + " (top " + std::to_string(run.router_k) + ")";
  out.x_label = "token position";
  out.y_label = "expert";
  out.colorbar_label = "weight";
  out.x_tokens = position_tokens(run);
  out.signature = run.name + "|router|" + pointer_signature(&run) + "|" + std::to_string(layer) + "|" +
                  std::to_string(run.routing.size());
  return true;
}

bool router_agreement_plot(const trace::RunTrace& run, const trace::RunTrace& baseline, HeatmapPlot& out,
                           std::string& why) {
  trace::Map2D m = analysis::router_agreement(run, baseline);
  if (m.empty()) {
    why = "runs '" + run.name + "' and '" + baseline.name + "' have no router choices to compare";
    return false;
  }
  out = HeatmapPlot{};
  out.map = std::move(m);
  out.scale = {ScaleKind::Linear, 0.0f, 1.0f};
  out.cmap = Colormap::Viridis;
  out.title = run.name + ": experts shared with " + baseline.name + ", every layer";
  out.x_label = "token position";
  out.y_label = "layer";
  out.colorbar_label = "share of top " + std::to_string(run.router_k);
  out.no_attention_label = "tokens differ";
  out.x_tokens = position_tokens(run);
  out.signature = run.name + "|router-agree|" + pointer_signature(&run) + pointer_signature(&baseline) + "|" +
                  std::to_string(run.routing.size()) + "," + std::to_string(baseline.routing.size());
  return true;
}

void RouterMap::update(const AppState& state) {
  const trace::RunTrace* run = state.active_run();
  if (!run) return;
  std::vector<const trace::RunTrace*> runs;
  for (const auto& e : state.runs)
    if (e.run) runs.push_back(e.run.get());
  const trace::RunTrace* baseline = find_baseline(runs, *run);
  const std::string sig = pointer_signature(run) + std::to_string(run->routing.size()) + "," +
                          std::to_string(state.sel.layer) + "," + pointer_signature(baseline);
  if (sig == signature_) return;
  signature_ = sig;
  have_weights_ = router_weights_plot(*run, state.sel.layer, weights_, why_);
  std::string unused;
  have_agreement_ = have_weights_ && baseline && router_agreement_plot(*run, *baseline, agreement_, unused);
}

void RouterMap::draw(AppState& state) {
  const trace::RunTrace* run = state.active_run();
  if (!run) {
    centered_hint("No run yet.");
    return;
  }
  run_combo("##run", state, state.active, ImGui::GetFontSize() * 14);
  ImGui::SameLine();
  layer_head_sliders(state.sel, shape_of(*run), /*heads=*/false);
  ImGui::SameLine();
  export_button(state, key());
  update(state);
  if (!have_weights_) {
    centered_hint(why_.c_str());
    return;
  }
  const trace::RunTrace& r = *run;
  ImVec2 avail = ImGui::GetContentRegionAvail();
  if (have_agreement_) avail.y = std::floor(avail.y / 2.0f) - ImGui::GetStyle().ItemSpacing.y;
  int clicked = -1;
  auto tooltip = [&](const HeatmapPlot& p, bool agreement) {
    token_guides(state.token, false);
    if (!ImPlot::IsPlotHovered()) return;
    const ImPlotPoint mp = ImPlot::GetPlotMousePos();
    int row = 0, col = 0;
    if (!cell_at(p.map, mp.x, mp.y, row, col)) return;
    ImGui::BeginTooltip();
    ImGui::Text("token %s", token_label(r, col).c_str());
    const float v = p.map.at(row, col);
    if (agreement && std::isnan(v))
      ImGui::Text("layer %d: the runs fed different tokens here", row);
    else if (agreement)
      ImGui::Text("layer %d: %.0f of %d experts shared", row, v * r.router_k, r.router_k);
    else
      ImGui::Text("expert %d: weight %.3f", row, v);
    ImGui::EndTooltip();
    if (plot_clicked()) clicked = col;
  };
  draw_heatmap("router_weights", weights_, avail, *state.textures, [&] { tooltip(weights_, false); });
  if (have_agreement_)
    draw_heatmap("router_agreement", agreement_, avail, *state.textures, [&] { tooltip(agreement_, true); });
  else
    ImGui::TextDisabled("A full-cache run of the same prompt adds the map of experts shared with it, every layer.");
  if (clicked >= 0) state.token = clicked;
}

Figure RouterMap::figure(const AppState& state) {
  update(state);
  Figure f;
  f.title = "router";
  if (have_weights_) f.parts.push_back(weights_);
  if (have_agreement_) f.parts.push_back(agreement_);
  return f;
}

}  // namespace kvscope::viewers
