#include "viewers/eviction_timeline.h"

#include <imgui.h>
#include <implot.h>

#include <cmath>
#include <algorithm>
#include <cstdio>

#include "viewers/step_cache.h"

namespace kvscope::viewers {

bool timeline_plot(const trace::RunTrace& run, int layer, int kv_head, bool aggregate, HeatmapPlot& out, std::string& why) {
  const RunShape shape = shape_of(run);
  if (shape.n_steps == 0 || shape.n_positions == 0) {
    why = "run '" + run.name + "' has no recorded steps yet";
    return false;
  }
  out = HeatmapPlot{};
  trace::Map2D& m = out.map;
  m.cols = m.source_cols = shape.n_positions;
  if (aggregate) {
    std::vector<float> share;
    int n_steps = 0;
    for (int l = 0; l < run.n_layers; ++l)
      for (int h = 0; h < run.n_kv_heads; ++h) {
        const auto states = entry_states(run, l, h);
        n_steps = static_cast<int>(states.size()) / shape.n_positions;
        if (share.empty()) share.assign(states.size(), 0.0f);
        for (std::size_t i = 0; i < states.size() && i < share.size(); ++i)
          share[i] += states[i] == static_cast<uint8_t>(EntryState::Kept);
      }
    const float total = static_cast<float>(std::max(1, run.n_layers * run.n_kv_heads));
    for (auto& v : share) v /= total;
    // Positions not yet processed at a step have no meaning; NaN shows them as the background colour.
    for (int s = 0; s < n_steps; ++s) {
      const int seen = s < run.n_steps() ? run.steps[s].seq_len : shape.n_positions;
      for (int p = seen; p < shape.n_positions; ++p) share[static_cast<std::size_t>(s) * shape.n_positions + p] = std::nanf("");
    }
    m.rows = m.source_rows = n_steps;
    m.values = std::move(share);
    out.scale = {ScaleKind::Linear, 0.0f, 1.0f};
    out.cmap = Colormap::Viridis;
    out.colorbar_label = "share of caches holding it";
    out.title = run.name + ": share of (layer, KV head) caches holding each position";
  } else {
    const auto states = entry_states(run, layer, kv_head);
    m.rows = m.source_rows = static_cast<int>(states.size()) / shape.n_positions;
    m.values.assign(states.begin(), states.end());
    out.categories = {{"not yet seen", {48, 48, 54, 255}},
                      {"kept", {86, 170, 100, 255}},
                      {"evicted", {214, 39, 40, 255}},
                      {"merged", {255, 160, 20, 255}}};
    out.title = run.name + ": cache of layer " + std::to_string(layer) + ", kv head " + std::to_string(kv_head);
  }
  // A run that stopped early (an end-of-generation token) never reached the positions its recording reserved for
  // the remaining new tokens: the axis ends at the last position the run processed.
  const int reached = positions_processed(run);
  if (reached > 0 && reached < m.cols) {
    std::vector<float> cropped;
    cropped.reserve(static_cast<std::size_t>(m.rows) * reached);
    for (int r = 0; r < m.rows; ++r) {
      const auto row = m.values.begin() + static_cast<std::ptrdiff_t>(r) * m.cols;
      cropped.insert(cropped.end(), row, row + reached);
    }
    m.values = std::move(cropped);
    m.cols = m.source_cols = reached;
  }
  out.x_label = "position";
  out.y_label = "step (prefill blocks, then decode)";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(&run));
  out.signature = run.name + buf + std::to_string(run.n_steps()) + "|tl|" + std::to_string(layer) + "," + std::to_string(kv_head) +
                  (aggregate ? "a" : "");
  return true;
}

const HeatmapPlot* EvictionTimeline::plot(const AppState& state) {
  const trace::RunTrace* run = state.active_run();
  if (!run) return nullptr;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(run));
  const int kv = selected_kv_head(state, shape_of(*run), kv_head);
  const std::string sig = std::string(buf) + std::to_string(run->n_steps()) + "|" + std::to_string(state.sel.layer) + "," +
                          std::to_string(kv) + (aggregate ? "a" : "");
  if (sig != signature_) {
    signature_ = sig;
    have_plot_ = timeline_plot(*run, state.sel.layer, kv, aggregate, cached_, why_);
  }
  return have_plot_ ? &cached_ : nullptr;
}

void EvictionTimeline::draw(AppState& state) {
  const trace::RunTrace* run = state.active_run();
  if (!run) {
    centered_hint("No run yet.");
    return;
  }
  const RunShape shape = shape_of(*run);
  ImGui::Checkbox("all caches", &aggregate);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Share of all (layer, KV head) caches that still hold each position");
  if (!aggregate) {
    ImGui::SameLine();
    layer_kv_head_sliders(state, shape);
  }
  same_line_if_fits(ImGui::GetFontSize() * 12);
  step_slider(state, *run);
  const std::string step_text = step_name(*run, resolve_step(*run, state.sel.step));
  same_line_if_fits(ImGui::CalcTextSize(step_text.c_str()).x);
  ImGui::TextDisabled("%s", step_text.c_str());
  same_line_if_fits(ImGui::GetFontSize() * 5);
  export_button(state, key());
  const HeatmapPlot* p = plot(state);
  if (!p) {
    centered_hint(why_.c_str());
    return;
  }
  const trace::RunTrace& r = *run;
  int clicked_pos = -1, clicked_step = -1;
  const std::vector<eval::EvidenceSpan>* evidence = state.evidence_of(state.active);
  // A short panel (the 1280x720 layout's lower row) left the steps a strip 20 px tall under the title and the axis
  // names: there those go, so the rows get the height. The toolbar's sliders already say which cache this is.
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  HeatmapPlot compact;
  if (avail.y < timeline_compact_height(ImGui::GetFontSize())) {
    compact = *p;
    compact.title.clear();
    compact.x_label.clear();
    compact.y_label.clear();
    p = &compact;
  }
  draw_heatmap("timeline", *p, avail, *state.textures, [&] {
    if (evidence) evidence_bands(*evidence);
    token_guides(state.token, false);
    step_guides(resolve_step(r, state.sel.step));
    const int first_decode = r.first_decode_step();
    if (first_decode > 0 && first_decode < r.n_steps()) {
      ImPlotSpec spec;
      spec.LineColor = ImVec4(1, 1, 1, 0.5f);
      spec.Flags = ImPlotItemFlags_NoLegend;
      const double y = first_decode;
      ImPlot::PlotInfLines("##decode", &y, 1, [&] {
        ImPlotSpec s = spec;
        s.Flags |= ImPlotInfLinesFlags_Horizontal;
        return s;
      }());
    }
    if (!ImPlot::IsPlotHovered()) return;
    const ImPlotPoint mp = ImPlot::GetPlotMousePos();
    int row = 0, col = 0;
    if (!cell_at(p->map, mp.x, mp.y, row, col)) return;
    ImGui::BeginTooltip();
    if (row < r.n_steps()) {
      const auto& st = r.steps[row];
      ImGui::Text("step %d: %s %d, %d tokens processed", row, st.phase == 0 ? "prefill block" : "decode step", st.step, st.seq_len);
    }
    ImGui::Text("position %s", token_label(r, col).c_str());
    const float v = p->map.at(row, col);
    if (p->categories.empty()) ImGui::Text("held by %.0f%% of caches", v * 100.0f);
    else ImGui::Text("%s", entry_state_name(static_cast<EntryState>(static_cast<int>(v))));
    ImGui::EndTooltip();
    if (plot_clicked()) clicked_pos = col, clicked_step = row;
  });
  if (clicked_pos >= 0) {
    state.token = clicked_pos;
    state.sel.step = clicked_step;
  }
}

Figure EvictionTimeline::figure(const AppState& state) {
  Figure f;
  f.title = "timeline";
  if (const HeatmapPlot* p = plot(state)) f.parts.push_back(*p);
  return f;
}

}  // namespace kvscope::viewers
