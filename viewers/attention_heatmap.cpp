#include "viewers/attention_heatmap.h"

#include <imgui.h>
#include <implot.h>

#include <cstdio>

namespace kvscope::viewers {

namespace {

std::string run_signature(const trace::RunTrace& run) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(&run));
  return run.name + "@" + buf + "/" + std::to_string(run.n_steps()) + (run.complete ? "c" : "p");
}

std::vector<uint8_t> key_marks(const trace::RunTrace& run, int layer, int kv_head, int step, int n_cols) {
  const auto states = entry_states(run, layer, kv_head);
  const RunShape shape = shape_of(run);
  const int n_pos = shape.n_positions;
  std::vector<uint8_t> marks(n_cols, 0);
  if (n_pos == 0 || states.empty()) return marks;
  const int n_steps = static_cast<int>(states.size()) / n_pos;
  if (n_steps == 0) return marks;
  const int s = step < 0 || step >= n_steps ? n_steps - 1 : step;
  for (int p = 0; p < n_cols && p < n_pos; ++p) {
    const auto st = static_cast<EntryState>(states[static_cast<std::size_t>(s) * n_pos + p]);
    marks[p] = st == EntryState::Evicted ? 1 : st == EntryState::Merged ? 2 : 0;
  }
  return marks;
}

}  // namespace

bool attention_plot(const trace::RunTrace& run, const Selection& sel, bool decode, bool marks, ScaleKind scale,
                    Colormap cmap, int max_cells, HeatmapPlot& out, std::string& why) {
  const trace::Map2D* m = decode ? run.decode_attention_map(sel.layer, sel.head) : run.attention_map(sel.layer, sel.head);
  if (!m || m->empty()) {
    why = std::string("run '") + run.name + "' has no " + (decode ? "decode" : "prefill") + " attention for layer " +
          std::to_string(sel.layer) + ", head " + std::to_string(sel.head) +
          (decode ? " (recorded only when more than one token is generated)" : " (not recorded, or the run is still in prefill)");
    return false;
  }
  out = HeatmapPlot{};
  out.map = pool_for_display(*m, max_cells, max_cells);
  out.scale = ColorScale::fit(out.map.values.data(), out.map.values.size(), scale);
  out.cmap = cmap;
  out.title = run.name + "  layer " + std::to_string(sel.layer) + ", head " + std::to_string(sel.head) +
              (decode ? "  (decode)" : "");
  out.x_label = "key position";
  out.y_label = decode ? "decode step" : "query position";
  out.colorbar_label = scale == ScaleKind::Log ? "log10 attention" : "attention";
  if (marks)
    out.column_marks = key_marks(run, sel.layer, kv_head_of(sel.head, shape_of(run)), sel.step, out.map.source_cols);
  out.signature = run_signature(run) + "|att|" + std::to_string(sel.layer) + "," + std::to_string(sel.head) + "," +
                  std::to_string(sel.step) + (decode ? "d" : "p") + (marks ? "m" : "") + std::to_string(max_cells) +
                  (scale == ScaleKind::Log ? "log" : "lin");
  return true;
}

void attention_tooltip(const trace::RunTrace& run, const HeatmapPlot& plot, const Selection& sel, bool decode) {
  if (!ImPlot::IsPlotHovered()) return;
  const ImPlotPoint mp = ImPlot::GetPlotMousePos();
  int r = 0, c = 0;
  if (!cell_at(plot.map, mp.x, mp.y, r, c)) return;
  const CellSpan span = cell_span(plot.map, r, c);
  ImGui::BeginTooltip();
  if (decode) {
    ImGui::Text("decode step %d  (query %s)", span.row_begin,
                token_label(run, run.prompt_length + span.row_begin).c_str());
  } else if (span.row_end - span.row_begin == 1) {
    ImGui::Text("query %s", token_label(run, span.row_begin).c_str());
  } else {
    ImGui::Text("queries %d..%d  (%s ..)", span.row_begin, span.row_end - 1, token_label(run, span.row_begin).c_str());
  }
  if (span.col_end - span.col_begin == 1) ImGui::Text("key   %s", token_label(run, span.col_begin).c_str());
  else ImGui::Text("keys  %d..%d  (%s ..)", span.col_begin, span.col_end - 1, token_label(run, span.col_begin).c_str());
  const float v = plot.map.at(r, c);
  ImGui::Text("%s %.4g%s", plot.map.pooling == trace::Pooling::Max ? "p" : "mean p", v,
              plot.map.full_resolution() ? "" : plot.map.pooling == trace::Pooling::Max ? "  (max over the block)" : "");
  const int kv = kv_head_of(sel.head, shape_of(run));
  const auto kept = entry_states(run, sel.layer, kv);
  const int n_pos = shape_of(run).n_positions;
  if (n_pos > 0 && !kept.empty() && span.col_begin < n_pos) {
    const int n_steps = static_cast<int>(kept.size()) / n_pos;
    const auto st = static_cast<EntryState>(kept[static_cast<std::size_t>(n_steps - 1) * n_pos + span.col_begin]);
    ImGui::TextDisabled("key #%d at the end (layer %d, kv head %d): %s", span.col_begin, sel.layer, kv, entry_state_name(st));
  }
  ImGui::TextDisabled("click: select the key token everywhere");
  ImGui::EndTooltip();
}

const HeatmapPlot* AttentionHeatmap::plot(const AppState& state) {
  const trace::RunTrace* run = state.active_run();
  if (!run) return nullptr;
  const std::string sig = run_signature(*run) + "|" + std::to_string(state.sel.layer) + "," + std::to_string(state.sel.head) +
                          "," + std::to_string(state.sel.step) + (decode ? "d" : "p") + (show_marks ? "m" : "") +
                          std::to_string(max_cells) + colormap_name(state.cmap) + (state.scale == ScaleKind::Log ? "log" : "lin");
  if (sig != signature_) {
    signature_ = sig;
    std::string why;
    have_plot_ = attention_plot(*run, state.sel, decode, show_marks, state.scale, state.cmap, max_cells, cached_, why);
    if (!have_plot_) cached_.title = why;
  }
  return have_plot_ ? &cached_ : nullptr;
}

void AttentionHeatmap::draw(AppState& state) {
  const trace::RunTrace* run = state.active_run();
  if (!run) {
    centered_hint("No run yet. A run starts from the Set-up panel; File > Open trace reads a recorded one.");
    return;
  }
  const RunShape shape = shape_of(*run);
  const float font = ImGui::GetFontSize();
  run_combo("##run", state, state.active, font * 14);
  same_line_if_fits(font * 22);
  layer_head_sliders(state.sel, shape);
  same_line_if_fits(checkbox_width("decode"));
  ImGui::Checkbox("decode", &decode);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Show the decode-step attention rows instead of the prefill map");
  same_line_if_fits(checkbox_width("marks"));
  ImGui::Checkbox("marks", &show_marks);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Mark keys evicted (red) or merged (orange) by the end of the run");
  same_line_if_fits(font * 12);
  color_controls(state);
  same_line_if_fits(font * 5);
  export_button(state, key());

  const HeatmapPlot* p = plot(state);
  if (!p) {
    centered_hint(cached_.title.c_str());
    return;
  }
  const trace::RunTrace& r = *run;
  const Selection sel = state.sel;
  int clicked = -1;
  draw_heatmap("attention", *p, ImGui::GetContentRegionAvail(), *state.textures, [&] {
    token_guides(state.token, !decode);
    attention_tooltip(r, *p, sel, decode);
    if (plot_clicked()) {
      const ImPlotPoint mp = ImPlot::GetPlotMousePos();
      if (mp.x >= 0 && mp.x < p->map.source_cols) clicked = static_cast<int>(mp.x);
    }
  });
  if (clicked >= 0) state.token = clicked;
}

Figure AttentionHeatmap::figure(const AppState& state) {
  Figure f;
  f.title = "attention";
  if (const HeatmapPlot* p = plot(state)) f.parts.push_back(*p);
  return f;
}

}  // namespace kvscope::viewers
