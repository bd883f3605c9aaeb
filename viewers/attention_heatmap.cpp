#include "viewers/attention_heatmap.h"

#include <imgui.h>
#include <implot.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "core/trace/recorder.h"
#include "viewers/session.h"
#include "viewers/step_cache.h"

namespace kvscope::viewers {

namespace {

std::string run_signature(const trace::RunTrace& run) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%p", static_cast<const void*>(&run));
  return run.name + "@" + buf + "/" + std::to_string(run.n_steps()) + (run.complete ? "c" : "p");
}

// The key-mark strip at the selected step: what became of each key by the end of that step.
std::vector<uint8_t> key_marks(const trace::RunTrace& run, int layer, int kv_head, int step, int n_cols) {
  const StepCache cache = cache_at_step(run, layer, kv_head, step);
  std::vector<uint8_t> marks(n_cols, 0);
  for (int p = 0; p < n_cols && p < static_cast<int>(cache.states.size()); ++p) {
    const auto st = static_cast<EntryState>(cache.states[p]);
    marks[p] = st == EntryState::Evicted ? 1 : st == EntryState::Merged ? 2 : st == EntryState::NotYetSeen ? 3 : 0;
  }
  return marks;
}

constexpr const char* kNoAttentionLabel = "no attention: masked, or key not in the cache";

// The active run is still in progress and records q/k: they are published with the end of its prefill, so a map
// without them yet must not say it was "recorded without q/k".
bool records_qk_later(const AppState& state) {
  if (state.active < 0 || state.active >= static_cast<int>(state.runs.size())) return false;
  const RunEntry& e = state.runs[state.active];
  if (!e.in_progress || !e.request) return false;
  try {
    return trace::RecordOptions::parse(e.request->record).records_qk(state.sel.layer);
  } catch (const std::exception&) {
    return false;
  }
}

std::string format_probability(float p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", p);
  return buf;
}

// "queries 12..40" or "query 12".
std::string span_text(const char* one, const char* many, int first, int end) {
  return end - first == 1 ? std::string(one) + " " + std::to_string(first)
                          : std::string(many) + " " + std::to_string(first) + ".." + std::to_string(end - 1);
}

}  // namespace

HeatmapPlot exact_attention_plot(const trace::RunTrace& run, const Selection& sel, int q0, int q1, int k0, int k1,
                                 int max_rows, int max_cols, ScaleKind scale, Colormap cmap) {
  const trace::ExactAttention exact(run, sel.layer, sel.head);
  trace::AttentionRegion region = exact.region(q0, q1, k0, k1, max_rows, max_cols, trace::Pooling::Max);
  HeatmapPlot out;
  out.map = std::move(region.map);
  blank_unattended(out.map, run, sel.layer, kv_head_of(sel.head, shape_of(run)), q0, k0);
  out.no_attention_label = kNoAttentionLabel;
  out.x_origin = k0;
  out.y_origin = q0;
  out.scale = ColorScale::fit(out.map.values.data(), out.map.values.size(), scale);
  out.cmap = cmap;
  const bool pooled = !out.map.full_resolution();
  out.title = run.name + ": layer " + std::to_string(sel.layer) + ", head " + std::to_string(sel.head) + ", " +
              span_text("query", "queries", q0, q1) + " x " + span_text("key", "keys", k0, k1) +
              (pooled ? " (exact, max over " + std::to_string(out.map.row_block) + "x" + std::to_string(out.map.col_block) +
                            " tokens a cell)"
                      : " (exact, every token)");
  out.x_label = "key position";
  out.y_label = "query position";
  out.colorbar_label = scale == ScaleKind::Log ? "log10 attention" : "attention";
  out.x_tokens = position_tokens(run);
  out.y_tokens.assign(out.x_tokens.begin(), out.x_tokens.begin() + std::min<std::size_t>(q1, out.x_tokens.size()));
  const auto all_marks = key_marks(run, sel.layer, kv_head_of(sel.head, shape_of(run)), sel.step, k1);
  out.column_marks.assign(all_marks.begin() + k0, all_marks.end());
  out.signature = run_signature(run) + "|exact|" + std::to_string(sel.layer) + "," + std::to_string(sel.head) + "|" +
                  std::to_string(q0) + ":" + std::to_string(q1) + "," + std::to_string(k0) + ":" + std::to_string(k1);
  return out;
}

// A model with sink logits (gpt-oss): the sink's share of each row as one more column after the last key, pooled
// over the displayed map's row blocks as the map is (the recorded column's blocks divide them).
void add_sink_column(const trace::Map2D& sink, HeatmapPlot& out) {
  trace::Map2D& m = out.map;
  if (sink.source_rows != m.source_rows || sink.rows == 0) return;
  std::vector<float> column(static_cast<std::size_t>(m.rows), 0.0f);
  std::vector<int> counts(column.size(), 0);
  for (int r = 0; r < sink.rows; ++r) {
    const int R = std::min(m.rows - 1, r * sink.row_block / m.row_block);
    float& cell = column[static_cast<std::size_t>(R)];
    cell = m.pooling == trace::Pooling::Max ? std::max(cell, sink.values[static_cast<std::size_t>(r)])
                                            : cell + sink.values[static_cast<std::size_t>(r)];
    ++counts[static_cast<std::size_t>(R)];
  }
  if (m.pooling == trace::Pooling::Mean)
    for (std::size_t R = 0; R < column.size(); ++R) column[R] /= static_cast<float>(std::max(1, counts[R]));
  std::vector<float> values;
  values.reserve(static_cast<std::size_t>(m.rows) * (m.cols + 1));
  for (int r = 0; r < m.rows; ++r) {
    values.insert(values.end(), m.row(r), m.row(r) + m.cols);
    values.push_back(column[static_cast<std::size_t>(r)]);
  }
  m.values = std::move(values);
  const int keys_end = m.cols * m.col_block;  // the sink's column starts after the last key block
  m.cols += 1;
  m.source_cols = keys_end + m.col_block;
  if (!out.column_marks.empty()) out.column_marks.resize(static_cast<std::size_t>(m.source_cols), 0);
  if (!out.x_tokens.empty()) out.x_tokens.resize(static_cast<std::size_t>(m.source_cols), "sink");
  out.sink_column = true;
  out.marks_x.push_back(keys_end);  // a guide between the last key and the sink
  out.x_label += " (right of the line: the sink's share of the row)";
}

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
  // Masked cells and keys not in the cache when a row ran hold 0 in the trace, which a log scale paints like the
  // faintest attention: they get their own colour instead.
  blank_unattended(out.map, run, sel.layer, kv_head_of(sel.head, shape_of(run)), decode ? run.prompt_length : 0);
  out.no_attention_label = kNoAttentionLabel;
  out.scale = ColorScale::fit(out.map.values.data(), out.map.values.size(), scale);
  out.cmap = cmap;
  out.title = run.name + ": layer " + std::to_string(sel.layer) + ", head " + std::to_string(sel.head) +
              (decode ? " (decode)" : "");
  out.x_label = "key position";
  out.y_label = decode ? "decode step" : "query position";
  out.colorbar_label = scale == ScaleKind::Log ? "log10 attention" : "attention";
  if (marks)
    out.column_marks = key_marks(run, sel.layer, kv_head_of(sel.head, shape_of(run)), sel.step, out.map.source_cols);
  if (const trace::Map2D* sink =
          decode ? run.decode_attention_sink_map(sel.layer, sel.head) : run.attention_sink_map(sel.layer, sel.head)) {
    add_sink_column(*sink, out);
    out.scale = ColorScale::fit(out.map.values.data(), out.map.values.size(), scale);
  }
  out.signature = run_signature(run) + "|att|" + std::to_string(sel.layer) + "," + std::to_string(sel.head) + "," +
                  std::to_string(sel.step) + (decode ? "d" : "p") + (marks ? "m" : "") + std::to_string(max_cells) +
                  (scale == ScaleKind::Log ? "log" : "lin");
  return true;
}

void attention_tooltip(const trace::RunTrace& run, const HeatmapPlot& plot, const Selection& sel, bool decode,
                       const trace::ExactAttention* exact) {
  if (!ImPlot::IsPlotHovered()) return;
  const ImPlotPoint mp = ImPlot::GetPlotMousePos();
  int r = 0, c = 0;
  if (!cell_at(plot.map, mp.x - plot.x_origin, mp.y - plot.y_origin, r, c)) return;
  const CellSpan span = cell_span(plot.map, r, c);
  if (plot.sink_column && c == plot.map.cols - 1) {
    ImGui::BeginTooltip();
    const int first = static_cast<int>(plot.y_origin) + span.row_begin;
    const int last = static_cast<int>(plot.y_origin) + span.row_end - 1;
    if (first == last)
      ImGui::Text("the sink's share of row %d: %.4g", first, plot.map.at(r, c));
    else
      ImGui::Text("the sink's share of rows %d..%d: %.4g (%s over the block)", first, last, plot.map.at(r, c),
                  trace::pooling_name(plot.map.pooling));
    ImGui::TextUnformatted("a learned logit per head in the softmax's denominator that attends to no value");
    ImGui::EndTooltip();
    return;
  }
  const int q_offset = decode ? run.prompt_length : 0;
  // The single (query, key) under the pointer, whatever the pooling, when q/k can rebuild it.
  const int query = q_offset + static_cast<int>(std::floor(mp.y)), key = static_cast<int>(std::floor(mp.x));
  const bool single = exact && query >= 0 && query < exact->n_queries() && key >= 0 && key < exact->n_keys();
  ImGui::BeginTooltip();
  if (single) {
    ImGui::Text("query %s%s", token_label(run, query).c_str(),
                decode ? ("  (decode step " + std::to_string(query - run.prompt_length) + ")").c_str() : "");
    ImGui::Text("key   %s", token_label(run, key).c_str());
    const float p = exact->probability(query, key);
    const trace::KeyState state = exact->key_state(query, key);
    // A grey cell says why it is grey rather than "p 0": the row never saw that key.
    if (state == trace::KeyState::Future) ImGui::Text("no attention: masked (the key comes after the query)");
    else if (state == trace::KeyState::NotInCache)
      ImGui::Text("no attention: the key was not in the cache when this row ran (evicted or merged away)");
    else if (std::isnan(p)) ImGui::Text("p absent: not rebuildable exactly (the row's layer was edited before it attended, or a merge changed the key)");
    else ImGui::Text("p %.6g  (exact, from the recorded q/k)", p);
    if (!plot.map.full_resolution()) {
      const float pooled = plot.map.at(r, c);
      // A block of masked or evicted cells only has no number: "max nan" read as a broken value.
      const std::string value = std::isnan(pooled) ? std::string("no attention in the block")
                                                   : (plot.map.pooling == trace::Pooling::Max ? "max " : "mean ") + format_probability(pooled);
      ImGui::TextDisabled("pooled map: %s over queries %d..%d / keys %d..%d", value.c_str(), q_offset + span.row_begin,
                          q_offset + span.row_end - 1, span.col_begin, span.col_end - 1);
    }
  } else {
    if (decode) {
      ImGui::Text("decode step %d  (query %s)", span.row_begin, token_label(run, run.prompt_length + span.row_begin).c_str());
    } else if (span.row_end - span.row_begin == 1) {
      ImGui::Text("query %s", token_label(run, span.row_begin).c_str());
    } else {
      ImGui::Text("queries %d..%d  (%s ..)", span.row_begin, span.row_end - 1, token_label(run, span.row_begin).c_str());
    }
    if (span.col_end - span.col_begin == 1) ImGui::Text("key   %s", token_label(run, span.col_begin).c_str());
    else ImGui::Text("keys  %d..%d  (%s ..)", span.col_begin, span.col_end - 1, token_label(run, span.col_begin).c_str());
    const float v = plot.map.at(r, c);
    if (std::isnan(v))  // masked (after the query) or not in the cache: grey, and no number to give
      ImGui::Text("%s", plot.map.full_resolution() ? "no attention" : "no attention anywhere in the block");
    else
      ImGui::Text("%s %s%s", plot.map.pooling == trace::Pooling::Max ? "p" : "mean p", format_probability(v).c_str(),
                  plot.map.full_resolution() ? "" : plot.map.pooling == trace::Pooling::Max ? "  (max over the block)" : "");
    if (!plot.map.full_resolution() && !trace::ExactAttention::available(run, sel.layer))
      ImGui::TextDisabled("pooled map only: %s", trace::ExactAttention::unavailable_reason(run, sel.layer).c_str());
  }
  const int kv = kv_head_of(sel.head, shape_of(run));
  const StepCache cache = cache_at_step(run, sel.layer, kv, sel.step);
  const int key_shown = single ? key : span.col_begin;
  if (key_shown >= 0 && key_shown < static_cast<int>(cache.states.size()))
    ImGui::TextDisabled("key #%d at the end of step %d, %s (layer %d, kv head %d): %s", key_shown, cache.step,
                        step_name(run, cache.step).c_str(), sel.layer, kv, entry_state_name(static_cast<EntryState>(cache.states[key_shown])));
  if (!single && std::isnan(plot.map.at(r, c))) ImGui::TextDisabled("%s", kNoAttentionLabel);
  ImGui::TextDisabled("click: select the key token everywhere");
  ImGui::EndTooltip();
}

void AttentionHeatmap::draw_exact_region(const AppState& state, const HeatmapPlot& overview) {
  region_shown_ = false;
  const trace::RunTrace* run = state.active_run();
  if (!exact_ || !run || overview.map.full_resolution()) return;  // a full-resolution map already shows every token
  const int q_offset = decode ? run->prompt_length : 0;
  const ImPlotRect lim = ImPlot::GetPlotLimits();
  const ImVec2 pixels = ImPlot::GetPlotSize();
  auto clamp_to = [](double v, int hi) { return std::clamp(static_cast<int>(v), 0, std::max(0, hi)); };
  const int rows = std::min(overview.map.source_rows, exact_->n_queries() - q_offset);
  const int cols = std::min(overview.map.source_cols, exact_->n_keys());
  const int r0 = clamp_to(std::floor(lim.Y.Min), rows), r1 = clamp_to(std::ceil(lim.Y.Max), rows);
  const int c0 = clamp_to(std::floor(lim.X.Min), cols), c1 = clamp_to(std::ceil(lim.X.Max), cols);
  if (r1 <= r0 || c1 <= c0 || static_cast<long>(r1 - r0) * (c1 - c0) > kMaxExactCells) return;
  const int max_rows = std::max(1, static_cast<int>(pixels.y)), max_cols = std::max(1, static_cast<int>(pixels.x));
  const std::string sig = signature_ + "|" + std::to_string(r0) + ":" + std::to_string(r1) + "," + std::to_string(c0) + ":" +
                          std::to_string(c1) + "|" + std::to_string(max_rows) + "x" + std::to_string(max_cols);
  if (sig != region_signature_) {
    region_signature_ = sig;
    region_ = HeatmapPlot{};
    region_.map = exact_->region(q_offset + r0, q_offset + r1, c0, c1, max_rows, max_cols, trace::Pooling::Max).map;
    blank_unattended(region_.map, *run, state.sel.layer, kv_head_of(state.sel.head, shape_of(*run)), q_offset + r0, c0);
  }
  // The overview's colour scale, so the rebuilt region continues the picture around it.
  const std::string texture_sig = sig + "|" + colormap_name(overview.cmap) + std::to_string(overview.scale.vmin) + "," +
                                  std::to_string(overview.scale.vmax) + (overview.scale.kind == ScaleKind::Log ? "log" : "lin");
  const trace::Map2D& m = region_.map;
  const ImTextureID tex = state.textures->get("attention_exact", texture_sig, [&] {
    return colorize(m.values.data(), m.rows, m.cols, overview.scale, overview.cmap, kNoAttentionColor);
  });
  if (tex == ImTextureID_Invalid) return;
  plot_map_image("##exact", tex, c0, r0, c0 + static_cast<double>(m.cols) * m.col_block, r0 + static_cast<double>(m.rows) * m.row_block);
  region_shown_ = true;
}

const HeatmapPlot* AttentionHeatmap::plot(const AppState& state) {
  const trace::RunTrace* run = state.active_run();
  if (!run) return nullptr;
  const std::string sig = run_signature(*run) + "|" + std::to_string(state.sel.layer) + "," + std::to_string(state.sel.head) +
                          "," + std::to_string(state.sel.step) + (decode ? "d" : "p") + (show_marks ? "m" : "") +
                          std::to_string(max_cells) + colormap_name(state.cmap) + (state.scale == ScaleKind::Log ? "log" : "lin") +
                          color_lock_signature(state);
  if (sig != signature_) {
    signature_ = sig;
    std::string why;
    have_plot_ = attention_plot(*run, state.sel, decode, show_marks, state.scale, state.cmap, max_cells, cached_, why);
    if (have_plot_) apply_color_lock(state, cached_);
    if (!have_plot_) cached_.title = why;
    exact_.reset();
    exact_run_ = state.runs[state.active].run;
    region_signature_.clear();
    if (have_plot_ && trace::ExactAttention::available(*run, state.sel.layer))
      exact_ = std::make_unique<trace::ExactAttention>(*exact_run_, state.sel.layer, state.sel.head);
    // Token names on the axes wherever a zoom shows single tokens: a full-resolution map, or any map with q/k. (A
    // pooled map without them would put one token's name under a block of several.) Names for the map's own
    // cells only, not the key-mark strip under it; decode rows are decode steps: row s is position prompt_length + s.
    if (have_plot_ && (exact_ || cached_.map.full_resolution())) {
      const std::vector<std::string> tokens = position_tokens(*run);
      auto names = [&](std::size_t first, std::size_t count) {
        first = std::min(first, tokens.size());
        return std::vector<std::string>(tokens.begin() + first, tokens.begin() + std::min(tokens.size(), first + count));
      };
      cached_.x_tokens = names(0, cached_.map.source_cols);
      cached_.y_tokens = names(decode ? run->prompt_length : 0, cached_.map.source_rows);
    }
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
  if (state.attention_decode) decode = *std::exchange(state.attention_decode, std::nullopt);
  ImGui::Checkbox("decode", &decode);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Show the decode-step attention rows instead of the prefill map");
  same_line_if_fits(checkbox_width("marks"));
  ImGui::Checkbox("marks", &show_marks);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("Mark keys evicted (red), merged (orange) or not yet in the cache (grey) at the end of the selected step");
  same_line_if_fits(font * 12);
  step_slider(state, *run);
  same_line_if_fits(font * 12);
  color_controls(state);
  same_line_if_fits(font * 5);
  export_button(state, key());

  const HeatmapPlot* p = plot(state);
  if (p) capture_color_lock(state, *p);
  if (!p) {
    centered_hint(cached_.title.c_str());
    return;
  }
  const trace::RunTrace& r = *run;
  const Selection sel = state.sel;
  int clicked = -1;
  if (p->map.full_resolution()) ImGui::TextDisabled("every token (the recorded map is at full resolution)");
  else if (exact_ && region_shown_) ImGui::TextDisabled("zoomed: exact attention rebuilt from the recorded q/k for the visible region");
  else if (exact_)
    ImGui::TextDisabled("overview pooled %dx%d tokens a cell; zoom in for exact attention from q/k (hover: the exact cell)",
                        p->map.row_block, p->map.col_block);
  else if (records_qk_later(state))
    ImGui::TextDisabled("pooled %dx%d tokens a cell so far; the run is in progress, its q/k (exact zoom) arrive with the "
                        "end of its prefill", p->map.row_block, p->map.col_block);
  else if (trace::ExactAttention::available(r)) {  // q/k of other layers only: a choice of the user's to point out
    ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.8f, 0.35f, 1.0f));
    ImGui::TextWrapped("pooled %dx%d tokens a cell; %s, so zooming cannot show single tokens", p->map.row_block,
                       p->map.col_block, trace::ExactAttention::unavailable_reason(r, sel.layer).c_str());
    ImGui::PopStyleColor();
  }
  else ImGui::TextDisabled("pooled %dx%d tokens a cell; recorded without q/k (--record qk=on), so zooming cannot show single tokens",
                           p->map.row_block, p->map.col_block);
  if (r.n_steps() == 0) {
    // Before its first step a run has no cache to describe: "step -1, no step: holds 0 of 0 tokens" said nothing true.
    ImGui::TextWrapped("no step recorded yet: the prefill is still running (its progress is in the status bar)");
  } else {
    const int kv = kv_head_of(state.sel.head, shape);
    const StepCache cache = cache_at_step(r, sel.layer, kv, sel.step);
    // A sliding-window layer (Gemma) says so: its queries see only the window, and its cache holds at most that.
    const std::string layer_type =
        r.layer_window(sel.layer) > 0 ? " (sliding-window layer, window " + std::to_string(r.layer_window(sel.layer)) + ")"
                                      : (r.layer_windows.empty() ? "" : " (global layer)");
    ImGui::TextWrapped("step %d, %s: layer %d%s, kv head %d holds %d of %d tokens (%d evicted, %d merged)", cache.step,
                       step_name(r, cache.step).c_str(), sel.layer, layer_type.c_str(), kv, cache.kept, cache.seq_len,
                       cache.evicted, cache.merged);
  }
  // In the decode view the selected decode step is one row: frame it.
  const int step_row = resolve_step(r, sel.step);
  const int decode_row = decode && step_row >= 0 && r.steps[step_row].phase == 1 ? r.steps[step_row].step : -1;
  std::optional<HeatmapPlot> zoomed;  // a script's zoom: this frame's copy carries the limits
  if (state.attention_zoom) {
    zoomed = *p;
    zoomed->view = state.attention_zoom;
    state.attention_zoom.reset();
    p = &*zoomed;
  }
  draw_heatmap("attention", *p, ImGui::GetContentRegionAvail(), *state.textures, [&] {
    draw_exact_region(state, *p);
    if (const auto* spans = state.evidence_of(state.active)) evidence_bands(*spans);
    token_guides(state.token, !decode);
    if (decode_row >= 0) step_guides(decode_row);
    attention_tooltip(r, *p, sel, decode, exact_.get());
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
