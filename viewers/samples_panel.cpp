#include "viewers/samples_panel.h"

#include <imgui.h>
#include <imgui_internal.h>  // TableSetColumnSortDirection: a script sets the sort

#include <algorithm>
#include <array>
#include <cstdio>

#include "core/common/error.h"

namespace kvscope::viewers {

namespace {

// Into the log panel, and on stderr like the session's messages, so scripted sessions keep a record.
void note(AppState& state, std::string text) {
  std::fprintf(stderr, "kvscope gui: %s\n", text.c_str());
  state.log.push_back(std::move(text));
}

int run_index(const AppState& state, const std::string& slot) {
  for (int i = 0; i < static_cast<int>(state.runs.size()); ++i)
    if (state.runs[static_cast<std::size_t>(i)].slot == slot) return i;
  return -1;
}

std::string number_text(const std::optional<double>& v, const char* format = "%.3g") {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, *v);
  return buf;
}

}  // namespace

void SamplesPanel::open_folder(const std::string& dir) {
  expected_ = reader_.open(dir);
  folder_ = dir;
  rows_.clear();
  selected_ = -1;
  pending_.reset();
}

bool SamplesPanel::busy() { return reader_.busy() || pending_.has_value(); }

void SamplesPanel::poll(AppState& state) {
  for (auto& r : reader_.take()) {
    if (r.damaged()) note(state, "error: samples: " + r.error);
    rows_.push_back(std::move(r));
    if (rows_.size() == expected_) {
      const long wrong = std::count_if(rows_.begin(), rows_.end(), [](const SampleRow& x) { return x.wrong(); });
      const long damaged = std::count_if(rows_.begin(), rows_.end(), [](const SampleRow& x) { return x.damaged(); });
      note(state, "samples: read " + std::to_string(rows_.size()) + " trace(s) from " + folder_ + " (" +
                      std::to_string(wrong) + " wrong, " + std::to_string(damaged) + " unreadable)");
    }
  }
  if (!pending_) return;
  if (show_sample(*pending_, state)) {
    pending_.reset();
    return;
  }
  // The read failed (the Session logged why) when the Session is idle and the runs still have not come: checked
  // on two frames running, since the runs may land between the window's poll of the Session and this one.
  pending_idle_frames_ = session_.idle() ? pending_idle_frames_ + 1 : 0;
  if (pending_idle_frames_ >= 2) {
    note(state, "error: samples: the runs of " + rows_[static_cast<std::size_t>(*pending_)].file + " did not load");
    pending_.reset();
  }
}

void SamplesPanel::select(int shown_row, AppState& state) {
  const std::vector<int> order = shown();
  if (shown_row < 0 || shown_row >= static_cast<int>(order.size()))
    throw UsageError("the Samples table shows " + std::to_string(order.size()) + " row(s)" +
                     (order.empty() ? "" : " (0.." + std::to_string(order.size() - 1) + ")") + ", not row " +
                     std::to_string(shown_row) +
                     (reader_.busy() ? "; the folder is still being read ('wait' first)" : ""));
  const int index = order[static_cast<std::size_t>(shown_row)];
  const SampleRow& row = rows_[static_cast<std::size_t>(index)];
  if (row.damaged()) throw UsageError("sample file '" + row.file + "' cannot be shown: " + row.error);
  selected_ = index;
  if (show_sample(index, state)) return;  // read before: its runs are on screen already
  session_.open_trace(row.path);
  pending_ = index;
  pending_idle_frames_ = 0;
}

bool SamplesPanel::show_sample(int index, AppState& state) {
  const SampleRow& row = rows_[static_cast<std::size_t>(index)];
  const int policy = run_index(state, row.path + "#" + row.policy_run);
  const int full = run_index(state, row.path + "#" + row.full_run);
  if (policy < 0 || full < 0) return false;
  const trace::RunTrace& run = *state.runs[static_cast<std::size_t>(policy)].run;
  state.active = policy;
  const RunShape shape = shape_of(run);
  // The step that sampled the first answer token, and the (layer, head) whose attention lost most there.
  Selection sel = state.sel;
  sel.step = row.first_answer_step;
  if (row.blame_layer >= 0) sel.layer = row.blame_layer, sel.head = row.blame_head;
  state.sel = clamp(sel, shape);
  if (policy != full) {
    state.compare_auto = false;
    state.compare = {full, policy};
    state.compare_sel.resize(2);
    std::vector<RunShape> shapes = {shape_of(*state.runs[static_cast<std::size_t>(full)].run), shape};
    state.compare_sel.linked = true;
    state.compare_sel.set_layer(1, state.sel.layer, shapes);
    state.compare_sel.set_head(1, state.sel.head, shapes);
    state.compare_sel.set_step(1, state.sel.step, shapes);
  }
  state.evidence_source = row.path;
  state.evidence = row.evidence.value_or(std::vector<eval::EvidenceSpan>{});
  if (!state.evidence.empty()) {
    int first = state.evidence.front().first, last = state.evidence.front().last;
    for (const auto& s : state.evidence) first = std::min(first, s.first), last = std::max(last, s.last);
    state.token = first;
    // Frame the evidence in the attention map: its keys with some context either side, and every query from the
    // evidence on (the rows that can attend to it) down to the end of the prompt.
    const int pad = std::max(8, (last - first + 1) / 2);
    const int rows_end = std::max(run.prompt_length, last + 1);
    state.attention_zoom =
        std::array<double, 4>{static_cast<double>(std::max(0, first - pad)), static_cast<double>(last + 1 + pad),
                              static_cast<double>(std::max(0, first - pad)), static_cast<double>(rows_end)};
  }
  state.focus_panel = "compare";
  note(state, "samples: showing " + row.file + " (" + row.policy_run + " beside " + row.full_run + ", step " +
                  std::to_string(row.first_answer_step) + ", " + std::to_string(state.evidence.size()) +
                  " evidence span(s))");
  return true;
}

void SamplesPanel::draw(AppState& state) {
  const float font = ImGui::GetFontSize();
  ImGui::SetNextItemWidth(font * 14);
  input_text("##folder", folder_);
  ImGui::SameLine();
  const bool reading = reader_.busy();
  if (ImGui::Button(reading ? "Reading..." : "Open folder")) {
    try {
      open_folder(folder_);
    } catch (const std::exception& e) {
      note(state, std::string("error: ") + e.what());
    }
  }
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("the folder `kvscope eval ruler|longbench|needle --traces DIR` wrote");
  same_line_if_fits(font * 16);
  ImGui::SetNextItemWidth(font * 13);
  int f = static_cast<int>(filter_);
  if (ImGui::Combo("show", &f, kSampleFilterNames, IM_ARRAYSIZE(kSampleFilterNames)))
    filter_ = static_cast<SampleFilter>(f);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "wrong: score below one half (the evaluations' rule)\nwrong with the evidence kept: wrong although at "
        "least half the layers kept at least half of the evidence");
  if (expected_ > 0) {
    ImGui::SameLine();
    ImGui::TextDisabled("%zu of %zu read", rows_.size(), expected_);
  }
  if (rows_.empty()) {
    centered_hint(reading ? "Reading the sample traces..."
                          : "Open a folder of per-sample traces (kvscope eval ruler|longbench|needle --traces DIR), "
                            "then click a row to see the policy's run beside the full cache's.");
    return;
  }
  table(state);
}

void SamplesPanel::sort_by(SampleColumn column, bool ascending) {
  column_ = column;
  ascending_ = ascending;
  sort_from_script_ = true;
}

void SamplesPanel::table(AppState& state) {
  const ImGuiTableFlags flags = ImGuiTableFlags_Sortable | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_ScrollX | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_Resizable |
                                ImGuiTableFlags_SizingFixedFit;
  if (!ImGui::BeginTable("##samples", kSampleColumns, flags)) return;
  // Each header's tooltip, in SampleColumn's order (the names: kSampleColumnNames).
  static const std::array<const char*, kSampleColumns> tooltips = {
      "the trace file (DIR/<task>_<index>.h5)",
      "eval_score of the policy's answer (red: wrong, below 0.5)",
      "eval_score of the full cache's answer",
      "evidence kept: the share of evidence tokens in the cache when the first answer token was sampled, "
         "mean over layers and KV heads (kvscope explain); red: mostly lost (half the layers kept under half)",
      "the largest full-cache attention mass on tokens the policy had evicted, over every (layer, query "
         "head), at the first answer token where the answers differ (kvscope explain's top row)",
      "the policy run's policy and budget",
      "eval_task: RULER task, LongBench dataset or needle",
      "eval_sample: the sample's index",
  };
  ImGui::TableSetupScrollFreeze(1, 1);  // the header row and the file column stay in view
  for (int c = 0; c < kSampleColumns; ++c)
    ImGui::TableSetupColumn(kSampleColumnNames[c],
                            c == 0 ? ImGuiTableColumnFlags_DefaultSort : ImGuiTableColumnFlags_None);
  // The header row by hand, so each header names what its column holds in a tooltip.
  ImGui::TableNextRow(ImGuiTableRowFlags_Headers);
  for (int c = 0; c < kSampleColumns; ++c) {
    ImGui::TableSetColumnIndex(c);
    ImGui::TableHeader(ImGui::TableGetColumnName(c));
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tooltips[static_cast<std::size_t>(c)]);
  }
  if (sort_from_script_) {  // ImGui keeps the sort in the table: tell it, so the header's arrow agrees
    ImGui::TableSetColumnSortDirection(static_cast<int>(column_),
                                       ascending_ ? ImGuiSortDirection_Ascending : ImGuiSortDirection_Descending,
                                       false);
    sort_from_script_ = false;
  }
  if (ImGuiTableSortSpecs* specs = ImGui::TableGetSortSpecs(); specs && specs->SpecsDirty) {
    if (specs->SpecsCount > 0) {
      column_ = static_cast<SampleColumn>(specs->Specs[0].ColumnIndex);
      ascending_ = specs->Specs[0].SortDirection != ImGuiSortDirection_Descending;
    }
    specs->SpecsDirty = false;
  }
  const std::vector<int> order = shown();
  int clicked = -1;
  for (int k = 0; k < static_cast<int>(order.size()); ++k) {
    const SampleRow& r = rows_[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])];
    ImGui::TableNextRow();
    ImGui::PushID(k);
    ImGui::TableSetColumnIndex(0);
    const bool is_selected = order[static_cast<std::size_t>(k)] == selected_;
    if (ImGui::Selectable(r.file.c_str(), is_selected, ImGuiSelectableFlags_SpanAllColumns)) clicked = k;
    if (ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      if (r.damaged()) {
        ImGui::TextUnformatted(r.error.c_str());
      } else {
        std::string refs;
        for (const auto& x : r.references) refs += (refs.empty() ? "" : " | ") + x;
        ImGui::Text("references: %s", refs.c_str());
        ImGui::Text("%s: %s", r.policy_run.c_str(), r.prediction.c_str());
        ImGui::Text("%s: %s", r.full_run.c_str(), r.full_prediction.c_str());
        if (r.blame_layer >= 0) ImGui::Text("most lost attention: layer %d, head %d", r.blame_layer, r.blame_head);
        if (!r.blame_note.empty()) ImGui::TextDisabled("no blame: %s", r.blame_note.c_str());
        ImGui::TextDisabled("click: show it in Compare");
      }
      ImGui::EndTooltip();
    }
    if (r.damaged()) {
      ImGui::TableSetColumnIndex(1);
      ImGui::TextColored(ImVec4(1.0f, 0.45f, 0.4f, 1.0f), "unreadable");  // the row's tooltip and the log say why
      ImGui::PopID();
      continue;
    }
    ImGui::TableSetColumnIndex(1);
    if (r.wrong())
      ImGui::TextColored(ImVec4(1.0f, 0.45f, 0.4f, 1.0f), "%s", number_text(r.score).c_str());
    else
      ImGui::TextUnformatted(number_text(r.score).c_str());
    ImGui::TableSetColumnIndex(2);
    ImGui::TextUnformatted(number_text(r.full_score).c_str());
    ImGui::TableSetColumnIndex(3);
    if (r.evidence_mostly_lost)
      ImGui::TextColored(ImVec4(1.0f, 0.45f, 0.4f, 1.0f), "%s", number_text(r.evidence_kept, "%.2f").c_str());
    else
      ImGui::TextUnformatted(r.evidence ? number_text(r.evidence_kept, "%.2f").c_str() : "no evidence");
    ImGui::TableSetColumnIndex(4);
    ImGui::TextUnformatted(number_text(r.blame_mass, "%.3f").c_str());
    ImGui::TableSetColumnIndex(5);
    ImGui::TextUnformatted(r.policy.c_str());
    ImGui::TableSetColumnIndex(6);
    ImGui::TextUnformatted(r.task.c_str());
    ImGui::TableSetColumnIndex(7);
    ImGui::TextUnformatted(r.sample ? std::to_string(*r.sample).c_str() : "-");
    ImGui::PopID();
  }
  ImGui::EndTable();
  if (clicked >= 0) {
    try {
      select(clicked, state);
    } catch (const std::exception& e) {
      note(state, std::string("error: ") + e.what());
    }
  }
}

}  // namespace kvscope::viewers
