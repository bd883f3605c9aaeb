#include "viewers/panel.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>

#include "viewers/run_names.h"
#include "viewers/step_cache.h"

namespace kvscope::viewers {

int AppState::upsert(RunEntry entry) {
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (runs[i].slot == entry.slot) {
      runs[i] = std::move(entry);
      return static_cast<int>(i);
    }
  runs.push_back(std::move(entry));
  return static_cast<int>(runs.size()) - 1;
}

std::string AppState::run_name(int i) const {
  if (i < 0 || i >= static_cast<int>(runs.size())) return "";
  return shown_run_names(runs)[i];
}

std::string run_label(const AppState& state, int i) {
  const RunEntry& entry = state.runs.at(i);
  std::string label = entry.run ? state.run_name(i) : entry.slot;
  // A name made unique already says where the run comes from ("snapkv_b25pct (kept 1)").
  const std::string tag = prompt_tag(state.runs, i);
  const bool origin_named = entry.run && label != entry.run->name + (tag.empty() ? "" : " [" + tag + "]");
  if (!origin_named && entry.slot == "live") label += "  [live]";
  else if (!origin_named && entry.slot == "baseline") label += "  [baseline]";
  else if (!origin_named && entry.source != "live") {
    const auto slash = entry.source.find_last_of('/');
    label += "  [" + (slash == std::string::npos ? entry.source : entry.source.substr(slash + 1)) + "]";
  }
  if (entry.in_progress) label += " ...";
  return label;
}

bool run_combo(const char* label, const AppState& state, int& index, float width) {
  bool changed = false;
  ImGui::SetNextItemWidth(width);
  const std::string preview = index >= 0 && index < static_cast<int>(state.runs.size()) ? run_label(state, index) : "(no run)";
  if (ImGui::BeginCombo(label, preview.c_str())) {
    for (int i = 0; i < static_cast<int>(state.runs.size()); ++i) {
      ImGui::PushID(i);
      if (ImGui::Selectable(run_label(state, i).c_str(), i == index)) {
        changed = i != index;
        index = i;
      }
      ImGui::PopID();
    }
    ImGui::EndCombo();
  }
  return changed;
}

bool layer_head_sliders(Selection& sel, const RunShape& shape, bool heads, const char* head_label) {
  bool changed = false;
  const float w = std::max(80.0f, ImGui::GetFontSize() * 9.0f);
  ImGui::SetNextItemWidth(w);
  changed |= ImGui::SliderInt("layer", &sel.layer, 0, std::max(0, shape.n_layers - 1));
  if (heads) {
    ImGui::SameLine();
    ImGui::SetNextItemWidth(w * 0.7f);
    changed |= ImGui::SliderInt(head_label, &sel.head, 0, std::max(0, shape.n_heads - 1));
  }
  sel = clamp(sel, shape);
  return changed;
}

namespace {

int grow_string(ImGuiInputTextCallbackData* data) {
  if (data->EventFlag == ImGuiInputTextFlags_CallbackResize) {
    auto* s = static_cast<std::string*>(data->UserData);
    s->resize(data->BufTextLen);
    data->Buf = s->data();
  }
  return 0;
}

}  // namespace

bool input_text(const char* label, std::string& s) {
  return ImGui::InputText(label, s.data(), s.capacity() + 1, ImGuiInputTextFlags_CallbackResize, grow_string, &s);
}

bool input_multiline(const char* label, std::string& s, float width, float height) {
  return ImGui::InputTextMultiline(label, s.data(), s.capacity() + 1, ImVec2(width, height),
                                   ImGuiInputTextFlags_CallbackResize, grow_string, &s);
}

bool layer_kv_head_sliders(AppState& state, const RunShape& shape) {
  // The KV head is the selected query head's (grouped-query attention), so every panel shows the same place in
  // the model; choosing a KV head here selects the first query head that reads it.
  Selection sel = state.sel;
  sel.head = kv_head_of(state.sel.head, shape);
  RunShape kv_shape = shape;
  kv_shape.n_heads = shape.n_kv_heads;
  const bool changed = layer_head_sliders(sel, kv_shape, true, "kv head");
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("The KV head of the selected query head %d (heads %d..%d read it)", state.sel.head,
                      sel.head * std::max(1, shape.n_heads / std::max(1, shape.n_kv_heads)),
                      (sel.head + 1) * std::max(1, shape.n_heads / std::max(1, shape.n_kv_heads)) - 1);
  if (!changed) return false;
  state.sel.layer = sel.layer;
  if (sel.head != kv_head_of(state.sel.head, shape))
    state.sel.head = sel.head * std::max(1, shape.n_heads / std::max(1, shape.n_kv_heads));
  return true;
}

int selected_kv_head(const AppState& state, const RunShape& shape, int fixed) {
  return fixed >= 0 ? std::min(fixed, std::max(0, shape.n_kv_heads - 1)) : kv_head_of(state.sel.head, shape);
}

bool step_slider(AppState& state, const trace::RunTrace& run) {
  const int n = run.n_steps();
  if (n == 0) return false;
  const int shown = resolve_step(run, state.sel.step);
  // The slider shows the row number only (the panels name the step beside it); "end" while it follows the run.
  const std::string format = state.sel.step < 0 ? "%d (end)" : "%d of " + std::to_string(n - 1);
  int value = shown;
  ImGui::SetNextItemWidth(std::max(90.0f, ImGui::GetFontSize() * 8.0f));
  const bool changed = ImGui::SliderInt("step", &value, 0, n - 1, format.c_str());
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Step %d: %s.\nThe cache at the end of this step in every panel (marks, kept set, timeline guide, "
                      "decode rows).\nPrefill blocks first, then decode steps; the last step follows a run as it grows.",
                      shown, step_name(run, shown).c_str());
  // The last step means "the end": a live run's selection then follows new steps.
  if (changed) state.sel.step = value == n - 1 ? -1 : value;
  return changed;
}

std::string token_label(const trace::RunTrace& run, int position) {
  std::string piece;
  if (position >= 0 && position < static_cast<int>(run.prompt_strings.size())) {
    piece = run.prompt_strings[position];
  } else {
    const int g = position - run.prompt_length;
    if (g >= 0 && g < static_cast<int>(run.generated_strings.size())) piece = run.generated_strings[g];
  }
  return "#" + std::to_string(position) + " '" + display_token(piece) + "'";
}

const char* entry_state_name(EntryState s) {
  switch (s) {
    case EntryState::NotYetSeen: return "not yet in the cache";
    case EntryState::Kept: return "kept";
    case EntryState::Evicted: return "evicted";
    case EntryState::Merged: return "merged";
  }
  return "?";
}

void color_controls(AppState& state) {
  int log = state.scale == ScaleKind::Log ? 1 : 0;
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 5.5f);
  if (ImGui::Combo("##scale", &log, "linear\0log\0")) state.scale = log ? ScaleKind::Log : ScaleKind::Linear;
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 6.0f);
  if (ImGui::BeginCombo("##cmap", colormap_name(state.cmap))) {
    for (Colormap c : kAllColormaps)
      if (c != Colormap::RdBu && ImGui::Selectable(colormap_name(c), c == state.cmap)) state.cmap = c;
    ImGui::EndCombo();
  }
  ImGui::SameLine();
  if (ImGui::Checkbox("lock range", &state.lock_color_range)) state.locked_scale.reset();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(state.locked_scale ? "Colour range locked at %.3g .. %.3g for every layer, head and run"
                                         : "Keep the colour range of the map shown now for every layer, head and run, "
                                           "so that colours compare across them",
                      state.locked_scale ? state.locked_scale->vmin : 0.0, state.locked_scale ? state.locked_scale->vmax : 0.0);
}

void capture_color_lock(AppState& state, const HeatmapPlot& plot) {
  if (state.lock_color_range && (!state.locked_scale || state.locked_scale->kind != plot.scale.kind))
    state.locked_scale = plot.scale;
}

void apply_color_lock(const AppState& state, HeatmapPlot& plot) {
  if (!state.lock_color_range || !state.locked_scale || state.locked_scale->kind != plot.scale.kind) return;
  plot.scale = *state.locked_scale;
  plot.signature += "|locked " + std::to_string(plot.scale.vmin) + "," + std::to_string(plot.scale.vmax);
}

std::string color_lock_signature(const AppState& state) {
  if (!state.lock_color_range) return "";
  if (!state.locked_scale) return "|lock pending";
  return "|lock " + std::to_string(state.locked_scale->vmin) + "," + std::to_string(state.locked_scale->vmax);
}

void export_button(AppState& state, const std::string& panel_key) {
  if (ImGui::SmallButton("Export...")) state.export_panel = panel_key;
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Save this panel's plot as PNG, SVG or PDF, at a pixel or print size");
}

void centered_hint(const char* text) {
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const ImVec2 size = ImGui::CalcTextSize(text, nullptr, false, avail.x * 0.8f);
  ImGui::SetCursorPos(ImVec2(ImGui::GetCursorPosX() + std::max(0.0f, (avail.x - size.x) / 2),
                             ImGui::GetCursorPosY() + std::max(0.0f, (avail.y - size.y) / 2)));
  ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + avail.x * 0.8f);
  ImGui::TextDisabled("%s", text);
  ImGui::PopTextWrapPos();
}

}  // namespace kvscope::viewers

#include <implot.h>

namespace kvscope::viewers {

bool plot_clicked() {
  return ImPlot::IsPlotHovered() && ImGui::IsMouseReleased(ImGuiMouseButton_Left) &&
         ImGui::GetIO().MouseDragMaxDistanceSqr[ImGuiMouseButton_Left] < 9.0f;
}

void token_guides(int position, bool horizontal) {
  if (position < 0) return;
  ImDrawList* dl = ImPlot::GetPlotDrawList();
  const ImPlotRect lim = ImPlot::GetPlotLimits();
  ImPlot::PushPlotClipRect();
  const ImU32 col = IM_COL32(255, 255, 255, 170);
  const ImVec2 a = ImPlot::PlotToPixels(position + 0.5, lim.Y.Min), b = ImPlot::PlotToPixels(position + 0.5, lim.Y.Max);
  dl->AddLine(a, b, col, 1.0f);
  if (horizontal) {
    const ImVec2 c = ImPlot::PlotToPixels(lim.X.Min, position + 0.5), d = ImPlot::PlotToPixels(lim.X.Max, position + 0.5);
    dl->AddLine(c, d, col, 1.0f);
  }
  ImPlot::PopPlotClipRect();
}

unsigned evidence_color(const std::string& kind) {
  if (kind == "needle value" || kind == "needle" || kind == "answer") return IM_COL32(255, 215, 0, 255);
  if (kind == "needle key") return IM_COL32(0, 210, 255, 255);
  if (kind == "chain") return IM_COL32(255, 120, 200, 255);
  return IM_COL32(255, 150, 40, 255);  // "word" and kinds added later
}

std::string evidence_kinds_at(const std::vector<eval::EvidenceSpan>& spans, int position) {
  std::string kinds;
  for (const auto& s : spans)
    if (position >= s.first && position <= s.last && kinds.find(s.kind) == std::string::npos)
      kinds += (kinds.empty() ? "" : ", ") + s.kind;
  return kinds;
}

void evidence_bands(const std::vector<eval::EvidenceSpan>& spans) {
  if (spans.empty()) return;
  ImDrawList* dl = ImPlot::GetPlotDrawList();
  const ImPlotRect lim = ImPlot::GetPlotLimits();
  ImPlot::PushPlotClipRect();
  for (const auto& s : spans) {
    const ImU32 c = evidence_color(s.kind);
    const ImVec2 a = ImPlot::PlotToPixels(s.first, lim.Y.Max), b = ImPlot::PlotToPixels(s.last + 1.0, lim.Y.Min);
    // At least two pixels wide, so a one-token span stays visible on a pooled overview of thousands of keys.
    const float x1 = std::max(b.x, a.x + 2.0f);
    dl->AddRectFilled(ImVec2(a.x, a.y), ImVec2(x1, b.y), (c & ~IM_COL32_A_MASK) | IM_COL32(0, 0, 0, 40));
    dl->AddLine(ImVec2(a.x, a.y), ImVec2(a.x, b.y), (c & ~IM_COL32_A_MASK) | IM_COL32(0, 0, 0, 200), 1.0f);
    dl->AddLine(ImVec2(x1, a.y), ImVec2(x1, b.y), (c & ~IM_COL32_A_MASK) | IM_COL32(0, 0, 0, 200), 1.0f);
  }
  ImPlot::PopPlotClipRect();
  if (!ImPlot::IsPlotHovered()) return;
  const int key = static_cast<int>(std::floor(ImPlot::GetPlotMousePos().x));
  for (const auto& s : spans)
    if (key >= s.first && key <= s.last) {
      ImGui::BeginTooltip();  // appends to the map's own read-out
      ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(evidence_color(s.kind)), "evidence: %s (tokens %d..%d)",
                         s.kind.c_str(), s.first, s.last);
      ImGui::EndTooltip();
    }
}

void step_guides(int row) {
  if (row < 0) return;
  ImDrawList* dl = ImPlot::GetPlotDrawList();
  const ImPlotRect lim = ImPlot::GetPlotLimits();
  ImPlot::PushPlotClipRect();
  const ImU32 col = IM_COL32(80, 220, 255, 230);
  for (double y : {static_cast<double>(row), row + 1.0}) {
    const ImVec2 a = ImPlot::PlotToPixels(lim.X.Min, y), b = ImPlot::PlotToPixels(lim.X.Max, y);
    dl->AddLine(a, b, col, 1.5f);
  }
  ImPlot::PopPlotClipRect();
}

}  // namespace kvscope::viewers

namespace kvscope::viewers {

void same_line_if_fits(float width) {
  const ImGuiStyle& style = ImGui::GetStyle();
  const float next_x = ImGui::GetItemRectMax().x + style.ItemSpacing.x;
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowWidth() - style.WindowPadding.x - style.ScrollbarSize;
  if (next_x + width <= right) ImGui::SameLine();
}

float checkbox_width(const char* label) {
  return ImGui::GetFrameHeight() + ImGui::GetStyle().ItemInnerSpacing.x + ImGui::CalcTextSize(label).x;
}

}  // namespace kvscope::viewers
