#include "viewers/compare_view.h"

#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <cstdio>

#include "viewers/attention_heatmap.h"

namespace kvscope::viewers {

namespace {

std::vector<RunShape> shapes(const AppState& state) {
  std::vector<RunShape> out;
  for (int idx : state.compare) out.push_back(state.run(idx) ? shape_of(*state.run(idx)) : RunShape{});
  return out;
}

// A sensible default: the active run and the runs of the same prompt, at most four.
void default_compare(AppState& state) {
  state.compare.erase(std::remove_if(state.compare.begin(), state.compare.end(), [&](int i) { return !state.run(i); }),
                      state.compare.end());
  if (!state.compare.empty() || !state.active_run()) return;
  const auto& ids = state.active_run()->prompt_ids;
  for (int i = 0; i < static_cast<int>(state.runs.size()) && state.compare.size() < 4; ++i)
    if (state.run(i)->prompt_ids == ids) state.compare.push_back(i);
}

}  // namespace

HeatmapPlot kept_diff_plot(const trace::RunTrace& a, const trace::RunTrace& b, int layer, int kv_head, KeptDiff& diff) {
  diff = diff_kept(kept_set(a, layer, kv_head), kept_set(b, layer, kv_head));
  HeatmapPlot p;
  p.map.rows = p.map.source_rows = 1;
  p.map.cols = p.map.source_cols = static_cast<int>(diff.state.size());
  p.map.values.assign(diff.state.begin(), diff.state.end());
  p.categories = {{"in neither", {48, 48, 54, 255}},
                  {"only " + a.name, {76, 114, 176, 255}},
                  {"only " + b.name, {221, 132, 82, 255}},
                  {"in both", {86, 170, 100, 255}}};
  p.title = "kept at the end, layer " + std::to_string(layer) + ", kv head " + std::to_string(kv_head);
  p.x_label = "position";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%p%p", static_cast<const void*>(&a), static_cast<const void*>(&b));
  p.signature = std::string("kd") + buf + std::to_string(layer) + "," + std::to_string(kv_head) + std::to_string(a.n_steps()) +
                std::to_string(b.n_steps());
  return p;
}

void CompareView::refresh(const AppState& state) {
  columns_.resize(state.compare.size());
  for (std::size_t i = 0; i < state.compare.size(); ++i) {
    const trace::RunTrace* r = state.run(state.compare[i]);
    if (!r || i >= state.compare_sel.size()) continue;
    const Selection sel = state.compare_sel[i];
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(r));
    const std::string sig = std::string(buf) + std::to_string(r->n_steps()) + "|" + std::to_string(sel.layer) + "," +
                            std::to_string(sel.head) + (decode ? "d" : "p") + colormap_name(state.cmap) +
                            (state.scale == ScaleKind::Log ? "log" : "lin");
    if (sig == columns_[i].signature) continue;
    columns_[i].signature = sig;
    columns_[i].ok = attention_plot(*r, sel, decode, true, state.scale, state.cmap, 512, columns_[i].plot, columns_[i].why);
    // Columns are narrow: the run name and place are the whole title.
    if (columns_[i].ok)
      columns_[i].plot.title = r->name + "  L" + std::to_string(sel.layer) + " H" + std::to_string(sel.head);
  }
  diff_.ok = false;
  if (show_difference && columns_.size() >= 2 && columns_[0].ok && columns_[1].ok) {
    const std::string sig = columns_[0].signature + "#" + columns_[1].signature;
    if (sig != diff_signature_) {
      diff_signature_ = sig;
      const trace::RunTrace* a = state.run(state.compare[0]);
      const trace::RunTrace* b = state.run(state.compare[1]);
      const Selection sa = state.compare_sel[0], sb = state.compare_sel[1];
      const trace::Map2D* ma = decode ? a->decode_attention_map(sa.layer, sa.head) : a->attention_map(sa.layer, sa.head);
      const trace::Map2D* mb = decode ? b->decode_attention_map(sb.layer, sb.head) : b->attention_map(sb.layer, sb.head);
      diff_.plot = HeatmapPlot{};
      diff_.why.clear();
      diff_.ok = false;
      try {
        if (ma && mb) {
          diff_.plot.map = pool_for_display(difference(*mb, *ma), 512, 512);
          diff_.plot.scale = ColorScale::symmetric(diff_.plot.map.values.data(), diff_.plot.map.values.size());
          diff_.plot.cmap = Colormap::RdBu;
          diff_.plot.title = b->name + " - " + a->name;
          diff_.plot.x_label = "key position";
          diff_.plot.y_label = decode ? "decode step" : "query position";
          diff_.plot.colorbar_label = "attention difference";
          diff_.plot.signature = "diff|" + sig;
          diff_.ok = true;
        }
      } catch (const std::exception& e) {
        diff_.why = e.what();
      }
      diff_.signature = diff_.ok ? "ok" : "";
    } else {
      diff_.ok = diff_.signature == "ok";
    }
  }
}

void CompareView::draw(AppState& state) {
  if (state.runs.size() < 2) {
    centered_hint("Compare needs at least two runs: press 'Keep for comparison' in the Set-up panel after a run, change "
                  "the policy or budget and run again, or open a trace file with several runs.");
    return;
  }
  default_compare(state);
  // Run chooser: a checkbox per run, at most four columns.
  if (ImGui::Button("Runs...")) ImGui::OpenPopup("compare_runs");
  if (ImGui::BeginPopup("compare_runs")) {
    for (int i = 0; i < static_cast<int>(state.runs.size()); ++i) {
      bool on = std::find(state.compare.begin(), state.compare.end(), i) != state.compare.end();
      ImGui::PushID(i);
      if (ImGui::Checkbox(run_label(state.runs[i]).c_str(), &on)) {
        if (on && state.compare.size() < 4) state.compare.push_back(i);
        else if (!on) state.compare.erase(std::find(state.compare.begin(), state.compare.end(), i));
      }
      ImGui::PopID();
    }
    ImGui::TextDisabled("two to four runs; the first is the reference");
    ImGui::EndPopup();
  }
  same_line_if_fits(checkbox_width("linked"));
  ImGui::Checkbox("linked", &state.compare_sel.linked);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Layer/head changes in one column apply to all columns");
  same_line_if_fits(checkbox_width("decode"));
  ImGui::Checkbox("decode", &decode);
  same_line_if_fits(checkbox_width("difference"));
  ImGui::Checkbox("difference", &show_difference);
  same_line_if_fits(ImGui::GetFontSize() * 12);
  color_controls(state);
  same_line_if_fits(ImGui::GetFontSize() * 5);
  export_button(state, key());
  if (state.compare_sel.size() != state.compare.size()) {
    state.compare_sel.resize(state.compare.size());
    for (std::size_t i = 0; i < state.compare.size(); ++i) {
      state.compare_sel.set_layer(i, state.sel.layer, shapes(state));
      state.compare_sel.set_head(i, state.sel.head, shapes(state));
    }
  }
  if (state.compare.empty()) return;
  refresh(state);

  const int n_cols = static_cast<int>(state.compare.size()) + (diff_.ok || !diff_.why.empty() ? 1 : 0);
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float gap = ImGui::GetStyle().ItemSpacing.x;
  const float col_w = (avail.x - gap * (n_cols - 1)) / n_cols;
  const float strip_h = ImGui::GetFontSize() * 6.5f;
  const float map_h = std::max(120.0f, avail.y - ImGui::GetFrameHeightWithSpacing() * 2 - strip_h);
  const auto all_shapes = shapes(state);
  const trace::RunTrace* ref = state.run(state.compare[0]);
  for (int i = 0; i < static_cast<int>(state.compare.size()); ++i) {
    const trace::RunTrace* r = state.run(state.compare[i]);
    if (i) ImGui::SameLine();
    ImGui::BeginGroup();
    ImGui::PushID(i);
    ImGui::PushItemWidth(col_w * 0.3f);
    ImGui::TextUnformatted(r->name.c_str());
    int layer = state.compare_sel[i].layer, head = state.compare_sel[i].head;
    ImGui::SetNextItemWidth(col_w * 0.4f);
    if (ImGui::SliderInt("layer", &layer, 0, std::max(0, all_shapes[i].n_layers - 1))) state.compare_sel.set_layer(i, layer, all_shapes);
    ImGui::SameLine();
    ImGui::SetNextItemWidth(col_w * 0.3f);
    if (ImGui::SliderInt("head", &head, 0, std::max(0, all_shapes[i].n_heads - 1))) state.compare_sel.set_head(i, head, all_shapes);
    ImGui::PopItemWidth();
    Column& c = columns_[i];
    if (c.ok) {
      const Selection sel = state.compare_sel[i];
      draw_heatmap(("cmp" + std::to_string(i)).c_str(), c.plot, ImVec2(col_w, map_h), *state.textures,
                   [&] { attention_tooltip(*r, c.plot, sel, decode); });
    } else {
      ImGui::BeginChild("##why", ImVec2(col_w, map_h), ImGuiChildFlags_Borders);
      ImGui::TextWrapped("%s", c.why.c_str());
      ImGui::EndChild();
    }
    if (i > 0 && r->n_layers == ref->n_layers && r->n_kv_heads == ref->n_kv_heads) {
      const Selection sel = state.compare_sel[i];
      const int kv = kv_head_of(sel.head, all_shapes[i]);
      KeptDiff d;
      const HeatmapPlot strip = kept_diff_plot(*ref, *r, sel.layer, kv, d);
      ImGui::Text("vs %s: both %d, only first %d, only this %d, Jaccard %.2f", ref->name.c_str(), d.both, d.only_a, d.only_b, d.jaccard);
      draw_heatmap(("kd" + std::to_string(i)).c_str(), strip, ImVec2(col_w, strip_h - ImGui::GetTextLineHeightWithSpacing()),
                   *state.textures);
    }
    ImGui::PopID();
    ImGui::EndGroup();
  }
  if (n_cols > static_cast<int>(state.compare.size())) {
    ImGui::SameLine();
    ImGui::BeginGroup();
    ImGui::TextUnformatted("difference");
    ImGui::TextDisabled("second run minus first");
    if (diff_.ok) draw_heatmap("cmpdiff", diff_.plot, ImVec2(col_w, map_h), *state.textures);
    else ImGui::TextWrapped("%s", diff_.why.c_str());
    ImGui::EndGroup();
  }
}

Figure CompareView::figure(const AppState& state) {
  if (state.compare_sel.size() == state.compare.size()) refresh(state);
  Figure f;
  f.title = "compare";
  for (const auto& c : columns_)
    if (c.ok) f.parts.push_back(c.plot);
  if (diff_.ok) f.parts.push_back(diff_.plot);
  return f;
}

}  // namespace kvscope::viewers
