#include "viewers/similarity_map.h"

#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace kvscope::viewers {

ColorScale off_diagonal_range(const trace::Map2D& map) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (int r = 0; r < map.rows; ++r)
    for (int c = 0; c < map.cols; ++c) {
      const CellSpan span = cell_span(map, r, c);
      // A cell whose rows and columns share a source entry holds a diagonal cosine (always 1).
      if (span.row_begin < span.col_end && span.col_begin < span.row_end) continue;
      const float v = map.at(r, c);
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (!(lo < hi)) return {ScaleKind::Linear, -1.0f, 1.0f};  // nothing, or one value, off the diagonal
  return {ScaleKind::Linear, lo, hi};
}

bool similarity_plot(const trace::RunTrace& run, int layer, int kv_head, bool values, bool fit_range, int max_cells,
                     HeatmapPlot& out, std::string& why) {
  const trace::Map2D* m = values ? run.value_similarity_map(layer, kv_head) : run.key_similarity_map(layer, kv_head);
  if (!m || m->empty()) {
    why = "run '" + run.name + "' has no " + (values ? "value" : "key") + " similarity map for layer " + std::to_string(layer) +
          ", kv head " + std::to_string(kv_head) + " (recorded at the end of prefill when similarity=on)";
    return false;
  }
  out = HeatmapPlot{};
  out.map = pool_for_display(*m, max_cells, max_cells);
  out.map.source_positions = m->source_positions;
  out.scale = fit_range ? off_diagonal_range(out.map) : ColorScale{ScaleKind::Linear, -1.0f, 1.0f};
  out.cmap = Colormap::RdBu;
  out.title = run.name + ": " + (values ? "value" : "key") + " cosine similarity, layer " + std::to_string(layer) +
              ", kv head " + std::to_string(kv_head);
  const bool remapped = !m->source_positions.empty();
  out.x_label = remapped ? "cache entry" : "key position";
  out.y_label = out.x_label;
  out.colorbar_label = "cosine";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(m));
  out.signature = run.name + "|sim|" + buf + (fit_range ? "f" : "") + std::to_string(max_cells);
  return true;
}

const HeatmapPlot* SimilarityMap::plot(const AppState& state) {
  const trace::RunTrace* run = state.active_run();
  if (!run) return nullptr;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(run));
  const int kv = selected_kv_head(state, shape_of(*run), kv_head);
  const std::string sig = std::string(buf) + std::to_string(state.sel.layer) + "," + std::to_string(kv) +
                          (values ? "v" : "k") + (fit_range ? "f" : "");
  if (sig != signature_) {
    signature_ = sig;
    have_plot_ = similarity_plot(*run, state.sel.layer, kv, values, fit_range, 1024, cached_, why_);
  }
  return have_plot_ ? &cached_ : nullptr;
}

void SimilarityMap::draw(AppState& state) {
  const trace::RunTrace* run = state.active_run();
  if (!run) {
    centered_hint("No run yet.");
    return;
  }
  const RunShape shape = shape_of(*run);
  run_combo("##run", state, state.active, ImGui::GetFontSize() * 14);
  ImGui::SameLine();
  layer_kv_head_sliders(state, shape);
  ImGui::SameLine();
  int which = values ? 1 : 0;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 5);
  if (ImGui::Combo("##kv", &which, "keys\0values\0")) values = which == 1;
  ImGui::SameLine();
  ImGui::Checkbox("fit range", &fit_range);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Colours from the lowest to the highest cosine off the diagonal (the diagonal, always 1, saturates)");
  ImGui::SameLine();
  export_button(state, key());
  const HeatmapPlot* p = plot(state);
  if (!p) {
    centered_hint(why_.c_str());
    return;
  }
  const trace::RunTrace& r = *run;
  int clicked = -1;
  draw_heatmap("similarity", *p, ImGui::GetContentRegionAvail(), *state.textures, [&] {
    const bool remapped = !p->map.source_positions.empty();
    if (!remapped) token_guides(state.token, true);
    if (!ImPlot::IsPlotHovered()) return;
    const ImPlotPoint mp = ImPlot::GetPlotMousePos();
    int row = 0, col = 0;
    if (!cell_at(p->map, mp.x, mp.y, row, col)) return;
    const CellSpan span = cell_span(p->map, row, col);
    auto pos = [&](int i) {
      return remapped && i < static_cast<int>(p->map.source_positions.size()) ? p->map.source_positions[i] : i;
    };
    ImGui::BeginTooltip();
    ImGui::Text("row %s", token_label(r, pos(span.row_begin)).c_str());
    ImGui::Text("col %s", token_label(r, pos(span.col_begin)).c_str());
    if (!p->map.full_resolution())
      ImGui::TextDisabled("block of %dx%d entries (%s)", span.row_end - span.row_begin, span.col_end - span.col_begin,
                          trace::pooling_name(p->map.pooling));
    ImGui::Text("cosine %.4f", p->map.at(row, col));
    ImGui::EndTooltip();
    if (plot_clicked()) clicked = pos(span.col_begin);
  });
  if (clicked >= 0) state.token = clicked;
}

Figure SimilarityMap::figure(const AppState& state) {
  Figure f;
  f.title = "similarity";
  if (const HeatmapPlot* p = plot(state)) f.parts.push_back(*p);
  return f;
}

}  // namespace kvscope::viewers
