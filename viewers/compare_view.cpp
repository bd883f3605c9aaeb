#include "viewers/compare_view.h"

#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "viewers/attention_heatmap.h"
#include "viewers/compare_layout.h"
#include "viewers/figure_size.h"

namespace kvscope::viewers {

namespace {

std::vector<RunShape> shapes(const AppState& state) {
  std::vector<RunShape> out;
  for (int idx : state.compare) out.push_back(state.run(idx) ? shape_of(*state.run(idx)) : RunShape{});
  return out;
}

}  // namespace

std::vector<int> auto_compare(const AppState& state) {
  std::vector<int> out;
  const trace::RunTrace* active = state.active_run();
  if (!active) return out;
  // The full-cache runs first: they are the reference every other column is diffed against.
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < static_cast<int>(state.runs.size()) && out.size() < 4; ++i) {
      const trace::RunTrace* r = state.run(i);
      if (!r || r->prompt_ids != active->prompt_ids || (r->meta("policy") == "full") != (pass == 0)) continue;
      out.push_back(i);
    }
  return out;
}

namespace {

void default_compare(AppState& state) {
  if (state.compare_auto) {
    state.compare = auto_compare(state);
    return;
  }
  state.compare.erase(std::remove_if(state.compare.begin(), state.compare.end(), [&](int i) { return !state.run(i); }),
                      state.compare.end());
}

}  // namespace

void follow_shared_selection(AppState& state) {
  const auto all_shapes = shapes(state);
  if (state.compare_sel.size() != state.compare.size()) {
    state.compare_sel.resize(state.compare.size());
    for (std::size_t i = 0; i < state.compare.size(); ++i) {
      state.compare_sel.set_layer(i, state.sel.layer, all_shapes);
      state.compare_sel.set_head(i, state.sel.head, all_shapes);
    }
  }
  if (!state.compare_sel.linked || state.compare.empty()) return;
  // set_layer/set_head on a linked selection move every column (each clamped to its run's shape).
  state.compare_sel.set_layer(0, state.sel.layer, all_shapes);
  state.compare_sel.set_head(0, state.sel.head, all_shapes);
}

void CompareView::sync(AppState& state) {
  default_compare(state);
  follow_shared_selection(state);
}

std::string compared_positions(const ComparableSpan& span, bool with_generated) {
  std::string text = span.prompt > 0 ? "prompt positions 0.." + std::to_string(span.prompt - 1) : "no shared prompt";
  if (!with_generated) return text;
  if (span.generated == 0) return text + " (the generated tokens differ from the first)";
  return text + " + " + std::to_string(span.generated) + " generated token" + (span.generated == 1 ? "" : "s") +
         " both runs agree on";
}

void kept_diff_strip(const KeptDiff& d, float width, float height, const trace::RunTrace& a, const trace::RunTrace& b) {
  static const ImU32 colors[4] = {IM_COL32(48, 48, 54, 255), IM_COL32(76, 114, 176, 255), IM_COL32(221, 132, 82, 255),
                                  IM_COL32(86, 170, 100, 255)};
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("##keptdiff", ImVec2(width, height));
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const int n = static_cast<int>(d.state.size());
  for (int i = 0; i < n; ++i) {
    const float x0 = p.x + width * i / n, x1 = p.x + width * (i + 1) / n;
    dl->AddRectFilled(ImVec2(x0, p.y), ImVec2(std::max(x1, x0 + 1.0f), p.y + height), colors[d.state[i] & 3]);
  }
  if (ImGui::IsItemHovered() && n > 0) {
    const int i = std::clamp(static_cast<int>((ImGui::GetIO().MousePos.x - p.x) / width * n), 0, n - 1);
    static const char* names[4] = {"in neither", "only in the first run", "only in this run", "in both"};
    ImGui::SetTooltip("position %s: %s\n(blue: only %s, orange: only %s, green: both)", token_label(b, i).c_str(),
                      names[d.state[i] & 3], a.name.c_str(), b.name.c_str());
  }
}

namespace {

// Whether any cell of `m` differs from zero (NaN cells, without attention in both runs, do not).
bool has_nonzero(const trace::Map2D& m) {
  return std::any_of(m.values.begin(), m.values.end(), [](float x) { return x != 0.0f && !std::isnan(x); });
}

}  // namespace

void CompareView::refresh(const AppState& state) {
  columns_.resize(state.compare.size());
  for (std::size_t i = 0; i < state.compare.size(); ++i) {
    const trace::RunTrace* r = state.run(state.compare[i]);
    if (!r || i >= state.compare_sel.size()) continue;
    const Selection sel = state.compare_sel[i];
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(r));
    const std::string sig = std::string(buf) + state.run_name(state.compare[i]) + std::to_string(r->n_steps()) + "|" +
                            std::to_string(sel.layer) + "," +
                            std::to_string(sel.head) + (decode ? "d" : "p") + colormap_name(state.cmap) +
                            (state.scale == ScaleKind::Log ? "log" : "lin") + color_lock_signature(state);
    if (sig == columns_[i].signature) continue;
    columns_[i].signature = sig;
    columns_[i].ok = attention_plot(*r, sel, decode, true, state.scale, state.cmap, 512, columns_[i].plot, columns_[i].why);
    columns_[i].fitted = columns_[i].plot.scale;
    if (columns_[i].ok) apply_color_lock(state, columns_[i].plot);
    // Columns are narrow: the run name and place are the whole title.
    if (columns_[i].ok) {
      columns_[i].plot.title = state.run_name(state.compare[i]) + " L" + std::to_string(sel.layer) + " H" + std::to_string(sel.head);
      columns_[i].plot.mark_legend = false;
    }
  }
  share_color_range(state);
  diff_.ok = false;
  const int n_columns = static_cast<int>(columns_.size());
  if (n_columns >= 2) {
    diff_minuend = std::clamp(diff_minuend, 0, n_columns - 1);
    diff_subtrahend = std::clamp(diff_subtrahend, 0, n_columns - 1);
  }
  const int ia = diff_subtrahend, ib = diff_minuend;
  if (show_difference && n_columns >= 2 && ia != ib && columns_[ia].ok && columns_[ib].ok) {
    const std::string sig = columns_[ia].signature + "#" + columns_[ib].signature;
    if (sig != diff_signature_) {
      diff_signature_ = sig;
      const trace::RunTrace* a = state.run(state.compare[ia]);
      const trace::RunTrace* b = state.run(state.compare[ib]);
      const Selection sa = state.compare_sel[ia], sb = state.compare_sel[ib];
      const trace::Map2D* ma = decode ? a->decode_attention_map(sa.layer, sa.head) : a->attention_map(sa.layer, sa.head);
      const trace::Map2D* mb = decode ? b->decode_attention_map(sb.layer, sb.head) : b->attention_map(sb.layer, sb.head);
      diff_.plot = HeatmapPlot{};
      diff_.why.clear();
      diff_.ok = false;
      diff_decode_ = false;
      // Decode maps of runs that generated different numbers of tokens: the steps and positions both ran.
      auto decode_difference = [](const trace::Map2D& later, const trace::Map2D& earlier) {
        const int rows = std::min(later.source_rows, earlier.source_rows);
        const int cols = std::min(later.source_cols, earlier.source_cols);
        return difference(crop_source(later, rows, cols), crop_source(earlier, rows, cols));
      };
      try {
        if (ma && mb) {
          diff_.plot.map = pool_for_display(decode ? decode_difference(*mb, *ma) : difference(*mb, *ma), 512, 512);
          diff_.plot.title = state.run_name(state.compare[ib]) + " - " + state.run_name(state.compare[ia]);
          diff_.plot.y_label = decode ? "decode step" : "query position";
          // A policy that compresses after prefill (SnapKV, PyramidKV, ...) computed its prefill attention over the
          // whole prompt, as the full cache did: the prefill difference is zero in every cell. Where the runs do
          // differ is the decode steps, reading a compressed cache: the map shows those and says so.
          if (!decode && !has_nonzero(diff_.plot.map)) {
            const trace::Map2D* da = a->decode_attention_map(sa.layer, sa.head);
            const trace::Map2D* db = b->decode_attention_map(sb.layer, sb.head);
            if (da && db && !da->empty() && !db->empty()) {
              diff_.plot.map = pool_for_display(decode_difference(*db, *da), 512, 512);
              diff_.plot.y_label = "decode step";
              diff_.plot.title += " (decode; prefill maps identical)";
              diff_decode_ = true;
            } else {
              diff_.plot.title += " (prefill maps identical)";
            }
          }
          diff_.plot.scale = ColorScale::symmetric(diff_.plot.map.values.data(), diff_.plot.map.values.size());
          diff_.plot.cmap = Colormap::RdBu;
          diff_.plot.x_label = "key position";
          diff_.plot.colorbar_label = "attention difference";
          diff_.plot.signature = "diff|" + sig + (diff_decode_ ? "|decode" : "");
          diff_.ok = true;
        }
      } catch (const std::exception& e) {
        diff_.ok = false;
        diff_.why = e.what();
      }
      diff_.signature = diff_.ok ? "ok" : "";
    } else {
      diff_.ok = diff_.signature == "ok";
    }
  }
}

void CompareView::share_color_range(const AppState& state) {
  // A colour means one value in every column: the columns share the range that covers all of theirs (a held lock
  // already gives each the same range). Figures then draw one colour bar for them (draw_figure).
  if (state.lock_color_range) return;
  std::optional<ColorScale> shared;
  for (const Column& c : columns_) {
    if (!c.ok) continue;
    if (!shared) shared = c.fitted;
    else if (shared->kind == c.fitted.kind)
      shared->vmin = std::min(shared->vmin, c.fitted.vmin), shared->vmax = std::max(shared->vmax, c.fitted.vmax);
  }
  // As ColorScale::fit floors a log scale: four decades below the top, so one column's near-zero tail does not
  // take every column's colours.
  if (shared && shared->kind == ScaleKind::Log) shared->vmin = std::max(shared->vmin, shared->vmax * 1e-4f);
  for (Column& c : columns_)
    if (c.ok && shared && c.fitted.kind == shared->kind) c.plot.scale = *shared;
}

CompareView::DiffHeader CompareView::difference_text(const AppState& state) const {
  DiffHeader h;
  const int n = static_cast<int>(state.compare.size());
  h.choosers = n >= 3;  // which two columns: with two there is only one pair
  if (diff_minuend == diff_subtrahend) {
    h.pair = "choose two different runs";
    return h;
  }
  // With the two menus the pair is named above already.
  h.pair = h.choosers ? std::string("red: the first attends more")
                      : state.run_name(state.compare[diff_minuend]) + " minus " +
                            state.run_name(state.compare[diff_subtrahend]) + "; red: the first attends more";
  const trace::RunTrace* a = state.run(state.compare[diff_subtrahend]);
  const trace::RunTrace* b = state.run(state.compare[diff_minuend]);
  if (!a || !b) return h;
  h.diverge = first_divergent_token(*a, *b);
  if (h.diverge >= 0)
    h.diverge_text = "generated tokens diverge at token " + std::to_string(h.diverge) + " (decode row " +
                     std::to_string(h.diverge) +
                     (decode || diff_decode_ ? ", yellow line)" : "; tick 'decode' to see it)");
  else if (a->prompt_ids == b->prompt_ids)
    h.diverge_text = "generated tokens agree while both runs generate";
  // One short line; the reason is the line's tooltip (a long note took the map's height in a short cell).
  if (diff_.ok && diff_decode_) h.note = "decode steps: the prefill maps are identical";
  else if (diff_.ok && !has_nonzero(diff_.plot.map)) h.note = "identical here: the two maps agree in every cell";
  return h;
}

void CompareView::draw_difference_header(AppState& state, const DiffHeader& h, float width) {
  const int n = static_cast<int>(state.compare.size());
  ImGui::TextUnformatted("difference");
  if (h.choosers) {
    auto column_combo = [&](const char* id, int& column) {
      ImGui::SetNextItemWidth(width * 0.42f);
      if (ImGui::BeginCombo(id, state.run_name(state.compare[column]).c_str())) {
        for (int i = 0; i < n; ++i)
          if (ImGui::Selectable(state.run_name(state.compare[i]).c_str(), i == column)) column = i;
        ImGui::EndCombo();
      }
    };
    column_combo("##minuend", diff_minuend);
    ImGui::SameLine();
    ImGui::TextUnformatted("minus");
    ImGui::SameLine();
    column_combo("##subtrahend", diff_subtrahend);
  }
  ImGui::TextDisabled("%s", h.pair.c_str());
  if (!h.diverge_text.empty()) ImGui::TextDisabled("%s", h.diverge_text.c_str());
  if (!h.note.empty()) {
    ImGui::TextUnformatted(h.note.c_str());
    if (ImGui::IsItemHovered() && diff_decode_)
      ImGui::SetTooltip("A policy that compresses after prefill (SnapKV, PyramidKV, ...) attends over the whole prompt\n"
                        "during prefill, as the full cache does: the prefill maps are equal in every cell. The runs\n"
                        "differ in the decode steps, which read the compressed cache: the map shows those.");
  }
}

void CompareView::draw(AppState& state) {
  if (state.runs.size() < 2) {
    centered_hint("Compare needs at least two runs: press 'Keep for comparison' in the Set-up panel after a run, change "
                  "the policy or budget and run again, or open a trace file with several runs.");
    return;
  }
  sync(state);
  // Run chooser: a checkbox per run, at most four columns.
  if (ImGui::Button("Runs...")) ImGui::OpenPopup("compare_runs");
  if (ImGui::BeginPopup("compare_runs")) {
    for (int i = 0; i < static_cast<int>(state.runs.size()); ++i) {
      bool on = std::find(state.compare.begin(), state.compare.end(), i) != state.compare.end();
      ImGui::PushID(i);
      if (ImGui::Checkbox(run_label(state, i).c_str(), &on)) {
        state.compare_auto = false;
        if (on && state.compare.size() < 4) state.compare.push_back(i);
        else if (!on) state.compare.erase(std::find(state.compare.begin(), state.compare.end(), i));
      }
      ImGui::PopID();
    }
    ImGui::TextDisabled("two to four runs; the first is the reference");
    if (ImGui::Checkbox("automatic (runs of this prompt, full cache first)", &state.compare_auto)) default_compare(state);
    ImGui::EndPopup();
  }
  same_line_if_fits(checkbox_width("linked"));
  ImGui::Checkbox("linked", &state.compare_sel.linked);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Layer/head changes in one column apply to all columns");
  same_line_if_fits(checkbox_width("decode"));
  ImGui::Checkbox("decode", &decode);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Maps: the decode steps instead of the prompt.\nKept sets: also the generated positions, as far "
        "as both runs generated the same tokens");
  same_line_if_fits(checkbox_width("difference"));
  ImGui::Checkbox("difference", &show_difference);
  same_line_if_fits(ImGui::GetFontSize() * 12);
  color_controls(state);
  same_line_if_fits(ImGui::GetFontSize() * 5);
  export_button(state, key());
  follow_shared_selection(state);  // the run chooser may have changed the columns
  if (state.compare.empty()) return;
  refresh(state);
  if (!columns_.empty() && columns_[0].ok) capture_color_lock(state, columns_[0].plot);

  const int n_runs = static_cast<int>(state.compare.size());
  const int n_cells = n_runs + (show_difference && n_runs >= 2 ? 1 : 0);
  ImGui::BeginChild("##grid", ImVec2(0, 0), ImGuiChildFlags_None);
  const ImGuiStyle& style = ImGui::GetStyle();
  const float font = ImGui::GetFontSize();
  // The runs' maps share one colour range (share_color_range, or a held lock), so one colour bar at the right
  // stands for all of them, as in the exported figure (draw_figure); the difference map keeps its own.
  const HeatmapPlot* shared_bar = shared_colour_bar();
  const float shared_bar_w = shared_bar ? std::round(font * static_cast<float>(kColorbarEm)) : 0.0f;
  float maps_top = std::numeric_limits<float>::max(), maps_bottom = 0;
  const ImVec2 avail = ImGui::GetContentRegionAvail();

  // What each cell writes above and below its map, once a frame: the layout measures it at every width it tries.
  const auto all_shapes = shapes(state);
  const trace::RunTrace* ref = state.run(state.compare[0]);
  struct KeptLine {
    KeptDiff diff;
    std::string text;
    bool shown = false;
  };
  std::vector<KeptLine> kept(n_runs);
  for (int i = 1; i < n_runs; ++i) {
    const trace::RunTrace* r = state.run(state.compare[i]);
    if (!r || !ref || r->n_layers != ref->n_layers || r->n_kv_heads != ref->n_kv_heads) continue;
    const Selection sel = state.compare_sel[i];
    const int kv = kv_head_of(sel.head, all_shapes[i]);
    // Only positions holding the same token in both runs are comparable: the shared prompt, and with 'decode'
    // ticked the generated tokens both runs agree on.
    const ComparableSpan span = comparable_span(*ref, *r);
    kept[i].diff = diff_kept_over(*ref, *r, sel.layer, kv, span.length(decode));
    const KeptDiff& d = kept[i].diff;
    char buf[96];
    std::snprintf(buf, sizeof buf, ": both %d, only first %d, only this %d, Jaccard %.2f", d.both, d.only_a, d.only_b, d.jaccard);
    kept[i].text = "kept vs " + ref->name + " (kv head " + std::to_string(kv) + ") over " +
                   compared_positions(span, decode) + buf;
    kept[i].shown = true;
  }
  static const char* const kReferenceNote =
      "reference: the other columns are compared with this run. Key strip: red evicted, orange merged. Grey cells: "
      "no attention (masked, or key not in the cache).";
  const DiffHeader diff_header = difference_text(state);
  auto text_h = [&](const std::string& text, float width) {
    return ImGui::CalcTextSize(text.c_str(), nullptr, false, width).y + style.ItemSpacing.y;
  };
  const float line_h = ImGui::GetTextLineHeightWithSpacing(), frame_h = ImGui::GetFrameHeightWithSpacing();
  // A map's frame holds, besides the data: its title (run maps), the x axis' ticks and name, padding; the data must
  // be as tall as the longest vertical label beside it (the y axis' name, the colour bar's title) and a little more.
  // (By pointer, not a copy: the layout asks for every cell at every width it tries, and a map holds its cells.)
  auto least_map = [&](const HeatmapPlot* plot, bool own_bar, bool titled) {
    float label = ImGui::CalcTextSize("query position").x;
    if (plot) {
      label = std::max(label, ImGui::CalcTextSize(plot->y_label.c_str()).x);
      if (own_bar) label = std::max(label, ImGui::CalcTextSize(colour_bar_title(plot->colorbar_label, plot->scale.kind).c_str()).x);
    }
    return label + font * (titled ? 6.0f : 4.5f);
  };
  auto chrome = [&](int i, float width) {
    CompareCellChrome c;
    if (i < n_runs) {
      c.above = text_h(state.run_name(state.compare[i]), width) + frame_h;
      if (i == 0) c.below = text_h(kReferenceNote, width);
      else if (kept[i].shown) c.below = font + style.ItemSpacing.y + text_h(kept[i].text, width);
      const Column* col = i < static_cast<int>(columns_.size()) && columns_[i].ok ? &columns_[i] : nullptr;
      c.least_map = least_map(col ? &col->plot : nullptr, !shared_bar, true);
    } else {
      c.above = line_h + (diff_header.choosers ? frame_h : 0.0f) + text_h(diff_header.pair, width) +
                (diff_header.diverge_text.empty() ? 0.0f : text_h(diff_header.diverge_text, width)) +
                (diff_header.note.empty() ? 0.0f : text_h(diff_header.note, width));
      c.least_map = least_map(diff_.ok ? &diff_.plot : nullptr, diff_.plot.colorbar, false);
    }
    c.above += style.ItemSpacing.y;  // the map's own
    return c;
  };
  CompareGridSpace space;
  space.width = avail.x - shared_bar_w;
  space.height = avail.y;
  space.spacing_x = style.ItemSpacing.x;
  space.spacing_y = style.ItemSpacing.y;
  space.min_cell_w = font * 16.0f;
  space.axes_w = font * 4.5f;
  space.axes_h = font * 4.5f;
  const CompareGrid grid = compare_grid(n_cells, space, chrome);
  const float cell_w = grid.cell_w, map_h = grid.map_h;
  const int per_row = grid.per_row;

  ImGui::BeginGroup();
  for (int i = 0; i < n_cells; ++i) {
    if (i % per_row) ImGui::SameLine();
    ImGui::BeginGroup();
    ImGui::PushID(i);
    ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + cell_w);
    if (i < n_runs) {
      const trace::RunTrace* r = state.run(state.compare[i]);
      ImGui::TextUnformatted(state.run_name(state.compare[i]).c_str());
      int layer = state.compare_sel[i].layer, head = state.compare_sel[i].head;
      ImGui::SetNextItemWidth(cell_w * 0.4f);
      // Linked, a column's slider is the shared selection: every panel moves with it, as with theirs.
      if (ImGui::SliderInt("layer", &layer, 0, std::max(0, all_shapes[i].n_layers - 1))) {
        if (state.compare_sel.linked) state.sel.layer = layer;
        state.compare_sel.set_layer(i, layer, all_shapes);
      }
      ImGui::SameLine();
      ImGui::SetNextItemWidth(cell_w * 0.25f);
      if (ImGui::SliderInt("head", &head, 0, std::max(0, all_shapes[i].n_heads - 1))) {
        if (state.compare_sel.linked) state.sel.head = head;
        state.compare_sel.set_head(i, head, all_shapes);
      }
      Column& c = columns_[i];
      if (c.ok) {
        const Selection sel = state.compare_sel[i];
        HeatmapPlot plot = c.plot;
        plot.colorbar = !shared_bar;
        draw_heatmap(("cmp" + std::to_string(i)).c_str(), plot, ImVec2(cell_w, map_h), *state.textures,
                     [&] {
                       maps_top = std::min(maps_top, ImPlot::GetPlotPos().y);
                       maps_bottom = std::max(maps_bottom, ImPlot::GetPlotPos().y + ImPlot::GetPlotSize().y);
                       if (const auto* spans = state.evidence_of(state.compare[i])) evidence_bands(*spans);
                       attention_tooltip(*r, c.plot, sel, decode);
                     });
      } else {
        ImGui::BeginChild("##why", ImVec2(cell_w, map_h), ImGuiChildFlags_Borders);
        ImGui::TextWrapped("%s", c.why.c_str());
        ImGui::EndChild();
      }
      if (kept[i].shown) {
        kept_diff_strip(kept[i].diff, cell_w, font * 1.0f, *ref, *r);
        ImGui::TextDisabled("%s", kept[i].text.c_str());
      } else if (i == 0) {
        ImGui::TextDisabled("%s", kReferenceNote);
      }
    } else {
      draw_difference_header(state, diff_header, cell_w);
      if (diff_.ok) {
        // In the decode view row s is the query of generated token s: the first row whose input differs.
        auto divergence_line = [&] {
          if (!(decode || diff_decode_) || diff_header.diverge < 0) return;
          const double y = diff_header.diverge;
          ImPlotSpec spec;
          spec.LineColor = ImVec4(1.0f, 0.85f, 0.2f, 1.0f);
          spec.LineWeight = 2.0f;
          spec.Flags = ImPlotItemFlags_NoLegend;
          spec.Flags |= ImPlotInfLinesFlags_Horizontal;
          ImPlot::PlotInfLines("##diverge", &y, 1, spec);
        };
        // The header above names the two runs, wrapped to the cell; the map's own title ("B - A (decode; prefill maps
        // identical)") is for exported figures, which wrap it, and ImPlot would cut it at a narrow cell's edge.
        HeatmapPlot plot = diff_.plot;
        plot.title.clear();
        draw_heatmap("cmpdiff", plot, ImVec2(cell_w, map_h), *state.textures, divergence_line);
      } else if (!diff_.why.empty()) {
        ImGui::TextWrapped("%s", diff_.why.c_str());
      } else if (diff_minuend != diff_subtrahend) {
        ImGui::TextWrapped("no difference map: one of the two columns has no map here");
      }
    }
    ImGui::PopTextWrapPos();
    ImGui::PopID();
    ImGui::EndGroup();
  }
  ImGui::EndGroup();
  if (shared_bar && maps_bottom > maps_top) {
    ImGui::SameLine(0, 0);
    draw_colour_bar(shared_bar->scale, shared_bar->cmap, shared_bar->colorbar_label,
                    ImVec2(shared_bar_w, ImGui::GetItemRectSize().y), maps_top, maps_bottom);
  }
  ImGui::EndChild();
}

const HeatmapPlot* CompareView::shared_colour_bar() const {
  const HeatmapPlot* first = nullptr;
  int n = 0;
  for (const Column& c : columns_) {
    if (!c.ok) continue;
    if (!first) first = &c.plot;
    else if (colour_scale_key(c.plot) != colour_scale_key(*first) || colour_scale_key(*first).empty()) return nullptr;
    ++n;
  }
  return n >= 2 ? first : nullptr;
}


Figure CompareView::figure(const AppState& state) {
  if (state.compare.empty() || state.compare_sel.size() != state.compare.size()) {
    // Not drawn yet (a script's `export compare` first thing): the columns the panel would show, on the shared
    // layer and head.
    AppState shown = state;
    default_compare(shown);
    if (shown.compare.empty()) shown.compare = auto_compare(shown);
    if (shown.compare.size() < 2) return {};
    shown.compare_sel.resize(shown.compare.size());
    for (std::size_t i = 0; i < shown.compare.size(); ++i) {
      shown.compare_sel.set_layer(i, state.sel.layer, shapes(shown));
      shown.compare_sel.set_head(i, state.sel.head, shapes(shown));
    }
    return figure(shown);
  }
  refresh(state);
  Figure f;
  f.title = "compare";
  for (const auto& c : columns_)
    if (c.ok) f.parts.push_back(c.plot);
  if (!diff_.ok) return f;
  f.parts.push_back(diff_.plot);
  return f;
}

}  // namespace kvscope::viewers
