#include "viewers/summary.h"

#include "viewers/run_names.h"

#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <limits>

#include "viewers/session.h"

namespace kvscope::viewers {

namespace {

double meta_number(const trace::RunTrace& run, const char* key) {
  try {
    return std::stod(run.meta(key, "nan"));
  } catch (...) {
    return std::numeric_limits<double>::quiet_NaN();
  }
}

std::vector<const trace::RunTrace*> all_runs(const AppState& state) {
  std::vector<const trace::RunTrace*> runs;
  for (const auto& e : state.runs)
    if (e.run) runs.push_back(e.run.get());
  return runs;
}

// A full-cache run of `run`'s prompt is still in progress: the numbers against the baseline are yet to come.
bool baseline_running(const AppState& state, const trace::RunTrace& run) {
  for (const auto& e : state.runs)
    if (e.run && e.run.get() != &run && (e.in_progress || !e.run->complete) && e.run->meta("policy") == "full" &&
        e.run->prompt_ids == run.prompt_ids)
      return true;
  return false;
}

}  // namespace

const trace::RunTrace* find_baseline(const std::vector<const trace::RunTrace*>& runs, const trace::RunTrace& run) {
  for (const auto* r : runs)
    if (r != &run && r->complete && r->meta("policy") == "full" && r->prompt_ids == run.prompt_ids) return r;
  return nullptr;
}

std::vector<std::pair<std::string, std::string>> fidelity_lines(const eval::FidelityResult& fidelity) {
  char buf[96];
  std::vector<std::pair<std::string, std::string>> out;
  std::snprintf(buf, sizeof buf, "%.3f", fidelity.score.top1_agreement);
  out.emplace_back("top-1 agreement", buf);
  std::snprintf(buf, sizeof buf, "%.4f nats", fidelity.score.kl_mean);
  out.emplace_back("KL(full || policy) mean", buf);
  std::snprintf(buf, sizeof buf, "%d of %d", fidelity.score.agreeing_prefix, fidelity.score.steps);
  out.emplace_back("tokens equal before divergence", buf);
  // Which tokens were compared: the full cache's greedy continuation, cut where the baseline run stops.
  out.emplace_back("tokens compared", fidelity.reference_stop_reason == "end_of_generation"
                                          ? std::to_string(fidelity.score.steps) +
                                                ", to the full cache's end of generation (where the baseline stops)"
                                          : std::to_string(fidelity.score.steps) +
                                                ", all new tokens (the full cache did not end sooner)");
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * fidelity.memory.saved());
  out.emplace_back("peak cache saved", buf);
  // `kvscope eval fidelity`'s "log-prob gap", as the table's column: one name, one definition.
  std::snprintf(buf, sizeof buf, "%.4f nats per token", fidelity.score.logprob_gap);
  out.emplace_back("log-prob gap (full minus policy)", buf);
  return out;
}

const char* const kCacheColumnsLegend =
    "bytes of full: K/V bytes allocated at the run's end / the full-cache baseline's at its end. entries of full: "
    "entries held at the end / (layers x KV heads x tokens the run processed). Both at each run's own end; they differ "
    "by allocation slack and when the run and the baseline generated different numbers of tokens.";

std::pair<std::string, std::string> cache_at_end_line(const RunNumbers& n) {
  auto percent = [](double share) {
    if (std::isnan(share)) return std::string("-");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * share);
    return std::string(buf);
  };
  return {"cache at the end, of the full cache's",
          percent(n.bytes_share) + " of its bytes, " + percent(n.kept_share) + " of its entries (the table's columns)"};
}

std::pair<std::string, std::string> stored_bytes_line(const RunNumbers& n) {
  if (std::isnan(n.entry_bytes)) return {};
  char buf[160];
  if (n.page_tokens > 0 && !std::isnan(n.paged_bytes)) {
    const double extra = n.entry_bytes > 0 ? 100.0 * (n.paged_bytes / n.entry_bytes - 1.0) : 0.0;
    std::snprintf(buf, sizeof buf, "entries as stored %.1f KiB; in pages of %d tokens %.1f KiB (%+.1f %%)",
                  n.entry_bytes / 1024.0, n.page_tokens, n.paged_bytes / 1024.0, extra);
  } else {
    std::snprintf(buf, sizeof buf, "entries as stored %.1f KiB (no --cache-page)", n.entry_bytes / 1024.0);
  }
  return {"cache bytes at the end, logical and physical", buf};
}

RunNumbers run_numbers(const trace::RunTrace& run, const trace::RunTrace* baseline) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  RunNumbers n;
  n.entry_bytes = meta_number(run, "cache_entry_bytes");
  n.paged_bytes = meta_number(run, "cache_paged_bytes");
  const double page_tokens = meta_number(run, "cache_page_tokens");
  n.page_tokens = std::isnan(page_tokens) ? 0 : static_cast<int>(page_tokens);
  n.cache_bytes = run.steps.empty() ? nan : static_cast<double>(run.steps.back().cache_bytes);
  n.full_cache_bytes = meta_number(run, "full_cache_bytes");
  if (std::isnan(n.full_cache_bytes) && baseline && !baseline->steps.empty())
    n.full_cache_bytes = static_cast<double>(baseline->steps.back().cache_bytes);
  // Allocated bytes over allocated bytes: the finished baseline's cache (same growth slack); a full-cache run is its own
  // reference. One definition only: before the baseline finishes there is no number (a payload-based guess shown
  // then read 32 % and became 26 % when the baseline arrived).
  const double reference_bytes = baseline && !baseline->steps.empty() ? static_cast<double>(baseline->steps.back().cache_bytes)
                                 : run.meta("policy") == "full"          ? n.cache_bytes
                                                                         : nan;
  n.bytes_share = reference_bytes > 0 ? n.cache_bytes / reference_bytes : nan;
  // Entries, not bytes: cache_bytes counts reserved capacity, which a full cache overshoots by its growth slack.
  if (!run.steps.empty() && run.n_layers > 0 && run.n_kv_heads > 0 && run.steps.back().seq_len > 0)
    n.kept_share = static_cast<double>(run.steps.back().cache_entries) /
                   (static_cast<double>(run.n_layers) * run.n_kv_heads * run.steps.back().seq_len);
  else
    n.kept_share = nan;
  double sum = 0;
  for (float lp : run.logprobs) sum += lp;
  n.mean_logprob = run.logprobs.empty() ? nan : sum / run.logprobs.size();
  n.logprob_gap = nan;
  if (baseline) {
    n.has_baseline = true;
    double bsum = 0;
    for (float lp : baseline->logprobs) bsum += lp;
    if (!baseline->logprobs.empty() && !run.logprobs.empty()) n.logprob_gap = n.mean_logprob - bsum / baseline->logprobs.size();
    const std::size_t m = std::min(run.generated_ids.size(), baseline->generated_ids.size());
    for (std::size_t i = 0; i < m; ++i)
      if (run.generated_ids[i] != baseline->generated_ids[i]) {
        n.first_divergence = static_cast<int>(i);
        break;
      }
    if (n.first_divergence < 0 && run.generated_ids.size() != baseline->generated_ids.size())
      n.first_divergence = static_cast<int>(m);
  }
  n.prefill_ms = meta_number(run, "prefill_ms");
  n.prefill_replayed = run.meta("prefill").rfind("replayed", 0) == 0;
  const double decode_ms = meta_number(run, "decode_ms");
  n.decode_ms_per_token = run.n_generated() > 1 ? decode_ms / (run.n_generated() - 1) : nan;
  return n;
}

void Summary::draw(AppState& state) {
  const auto runs = all_runs(state);
  if (runs.empty()) {
    centered_hint("No run yet.");
    return;
  }
  export_button(state, key());
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollX |
                                ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Resizable;
  const float table_h = std::min(ImGui::GetContentRegionAvail().y * 0.55f, ImGui::GetTextLineHeightWithSpacing() * (runs.size() + 2.5f));
  // Fixed-fit columns fit their content when the table is first shown only: a table named after the run names
  // fits again when a longer name (a kept run's "(kept 1)", a prompt tag) appears.
  std::string shown;
  for (int i = 0; i < static_cast<int>(state.runs.size()); ++i) shown += state.run_name(i) + "\n";
  const std::string table_id = "##runs" + std::to_string(std::hash<std::string>{}(shown));
  if (ImGui::BeginTable(table_id.c_str(), 11, flags, ImVec2(0, table_h))) {
    // Each header says what its number measures; its tooltip says how.
    static const char* const names[] = {"run", "prompt", "gen", "cache KiB", "bytes of full", "entries of full",
                                        "mean log p", "log-prob gap", "diverges at", "top-1 / equal", "prefill / decode ms"};
    static const char* const how[] = {
        "", "prompt tokens", "generated tokens",
        "K/V bytes the cache holds allocated at the end (growth slack included)",
        "cache KiB / the full-cache baseline's cache KiB, once the baseline has finished",
        "entries held / (layers x KV heads x tokens processed)",
        "mean natural-log probability of the run's own generated tokens",
        "as `kvscope eval fidelity` prints it: mean log p of the full cache's continuation under the full cache minus "
        "under the policy, teacher-forced on the same tokens (nats per token; positive: the policy finds the full "
        "cache's text less likely)",
        "first generated token that differs from the baseline",
        "fidelity to the full cache, teacher-forced on its continuation up to its end of generation (as the baseline "
        "stops): share of steps whose most likely token agrees / tokens equal before the first disagreement",
        "prefill time (or 'replayed': taken from a capture of the same prompt, no forward pass) / decode ms per token"};
    for (const char* name : names) ImGui::TableSetupColumn(name);
    ImGui::TableSetupScrollFreeze(1, 1);
    ImGui::TableNextRow(ImGuiTableRowFlags_Headers);
    for (int c = 0; c < 11; ++c) {
      ImGui::TableSetColumnIndex(c);
      ImGui::TableHeader(ImGui::TableGetColumnName(c));
      if (ImGui::IsItemHovered() && how[c][0]) ImGui::SetTooltip("%s", how[c]);
    }
    for (int i = 0; i < static_cast<int>(state.runs.size()); ++i) {
      const trace::RunTrace* r = state.run(i);
      if (!r) continue;
      const RunNumbers n = run_numbers(*r, find_baseline(runs, *r));
      // A run in progress has no final numbers yet: say so instead of showing partial ones or NaN.
      const bool running = state.runs[i].in_progress || !r->complete;
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::PushID(i);
      if (ImGui::Selectable(state.run_name(i).c_str(), i == state.active, ImGuiSelectableFlags_SpanAllColumns)) state.active = i;
      if (ImGui::IsItemHovered())
        ImGui::SetTooltip("%s\npolicy %s, budget %s\nstop: %s%s", run_label(state, i).c_str(), r->meta("policy_spec").c_str(),
                          r->meta("budget", "(whole prompt)").c_str(), r->meta("stop_reason", "(running)").c_str(),
                          r->complete ? "" : "\n(incomplete)");
      ImGui::PopID();
      ImGui::TableNextColumn();
      ImGui::Text("%d", r->prompt_length);
      ImGui::TableNextColumn();
      ImGui::Text("%d", r->n_generated());
      auto number = [&](double v, const char* format, double scale) {
        ImGui::TableNextColumn();
        if (running) ImGui::TextDisabled("running...");
        else if (std::isnan(v)) ImGui::TextDisabled("-");
        else ImGui::Text(format, v * scale);
      };
      number(n.cache_bytes, "%.0f", 1.0 / 1024.0);
      if (!running && std::isnan(n.bytes_share) && baseline_running(state, *r)) {
        ImGui::TableNextColumn();
        ImGui::TextDisabled("baseline...");  // not a number that changes when the baseline arrives
      } else {
        number(n.bytes_share, "%.0f%%", 100.0);
      }
      number(n.kept_share, "%.0f%%", 100.0);
      number(n.mean_logprob, "%.3f", 1.0);
      ImGui::TableNextColumn();
      const RunEntry& entry = state.runs[i];
      if (running) ImGui::TextDisabled("running...");
      else if (entry.fidelity) ImGui::Text("%.4f", entry.fidelity->score.logprob_gap);
      else if (r->meta("policy") == "full") ImGui::TextDisabled("reference");
      else ImGui::TextDisabled(entry.request && entry.request->fidelity ? "measuring..." : "-");
      ImGui::TableNextColumn();
      if (running || !n.has_baseline) ImGui::TextDisabled(running ? "running..." : "-");
      else if (n.first_divergence < 0) ImGui::Text("identical");
      else ImGui::Text("token %d", n.first_divergence);
      ImGui::TableNextColumn();
      if (running) ImGui::TextDisabled("running...");
      else if (entry.fidelity)
        ImGui::Text("%.2f / %d of %d", entry.fidelity->score.top1_agreement, entry.fidelity->score.agreeing_prefix,
                    entry.fidelity->score.steps);
      else if (r->meta("policy") == "full") ImGui::TextDisabled("reference");
      else ImGui::TextDisabled(entry.request && entry.request->fidelity ? "measuring..." : "-");
      ImGui::TableNextColumn();
      if (running) ImGui::TextDisabled("running...");
      else if (n.prefill_replayed) ImGui::Text("replayed / %.1f", n.decode_ms_per_token);
      else ImGui::Text("%.0f / %.1f", n.prefill_ms, n.decode_ms_per_token);
    }
    ImGui::EndTable();
  }
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("%s", kCacheColumnsLegend);
  ImGui::PopStyleColor();
  if (const trace::RunTrace* r = state.active_run()) {
    const RunEntry& entry = state.runs[state.active];
    if (r->complete) {
      const auto [label, value] = stored_bytes_line(run_numbers(*r, find_baseline(runs, *r)));
      if (!label.empty()) {
        // Both wrapped: the docked Summary is narrow.
        ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
        ImGui::TextWrapped("%s (%s):", label.c_str(), r->name.c_str());
        ImGui::PopStyleColor();
        ImGui::TextWrapped("%s", value.c_str());
        if (ImGui::IsItemHovered())
          ImGui::SetTooltip("as stored: the kept entries' payload, scales, zero points and full-precision residual,\n"
                            "without allocation slack (generate --json's cache.entry_bytes). In pages: what a serving\n"
                            "engine that allocates N-token pages per layer and KV head would hold (--cache-page N).");
      }
    }
    if (entry.fidelity) {
      ImGui::SeparatorText(("fidelity to the full cache, " + r->name).c_str());
      if (ImGui::BeginTable("##fidelity", 2, ImGuiTableFlags_SizingFixedFit)) {
        auto lines = fidelity_lines(*entry.fidelity);
        // What the budget kept, under the peak, from the table's columns of this run: one number, one definition.
        const auto end_line = cache_at_end_line(run_numbers(*r, find_baseline(runs, *r)));
        const auto peak = std::find_if(lines.begin(), lines.end(), [](const auto& l) { return l.first == "peak cache saved"; });
        lines.insert(peak == lines.end() ? peak : peak + 1, end_line);
        for (const auto& [label, value] : lines) {
          ImGui::TableNextColumn();
          ImGui::TextDisabled("%s", label.c_str());
          if (label == end_line.first && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", kCacheColumnsLegend);
          if (label == "peak cache saved" && ImGui::IsItemHovered())
            ImGui::SetTooltip("1 - the policy's largest cache / the full cache's, over prefill and decode, in the\n"
                              "teacher-forced runs fidelity measures (as `kvscope eval fidelity` prints memory_saved).\n"
                              "A policy that compresses after prefill holds the whole prompt first, so its peak\n"
                              "is the same at every budget; the line below says what the budget kept.");
          ImGui::TableNextColumn();
          ImGui::TextUnformatted(value.c_str());
        }
        ImGui::EndTable();
      }
    } else if (entry.request && entry.request->fidelity && r->meta("policy") != "full" && r->complete) {
      ImGui::TextDisabled("measuring fidelity to the full cache ...");
    }
    ImGui::SeparatorText(("continuation of " + r->name).c_str());
    std::string text = r->meta("generated_text");
    if (text.empty())
      for (const auto& s : r->generated_strings) text += s;
    ImGui::BeginChild("##text", ImVec2(0, 0), ImGuiChildFlags_Borders);
    ImGui::TextWrapped("%s", text.c_str());
    ImGui::EndChild();
  }
}

Figure Summary::figure(const AppState& state) {
  Figure f;
  f.title = "summary";
  const auto runs = all_runs(state);
  LinePlot share, gap;
  share.legend_outside = gap.legend_outside = true;  // bars fill the plot: the legend goes beside them
  share.title = "Cache entries kept (entries, not bytes)";
  share.y_label = "% of the full cache";
  // Not the table's "log-prob gap" (the CLI's, teacher-forced on the same tokens): a name of its own.
  gap.title = "Mean log p minus the full cache's (own texts)";
  gap.y_label = "nats per token";
  std::vector<std::string> names;  // the shown names of runs[], which are state.runs' entries that have a run
  const std::vector<std::string> all_names = shown_run_names(state.runs);
  for (std::size_t e = 0; e < state.runs.size(); ++e)
    if (state.runs[e].run) names.push_back(all_names[e]);
  for (int i = 0; i < static_cast<int>(runs.size()); ++i) {
    const RunNumbers n = run_numbers(*runs[i], find_baseline(runs, *runs[i]));
    LineSeries a, b;
    // The tick labels name the runs, and so does a legend: a figure whose names turn upright or thin out still
    // says which bar is which.
    a.name = b.name = names[i];
    a.kind = b.kind = LineSeries::Kind::Bars;
    a.color = b.color = i;
    a.x = {static_cast<double>(share.x_tick_labels.size())};
    a.y = {100.0 * n.kept_share};
    share.series.push_back(a);
    share.x_tick_labels.push_back(names[i]);
    if (!std::isnan(n.logprob_gap)) {
      b.x = {static_cast<double>(gap.x_tick_labels.size())};
      b.y = {n.logprob_gap};
      gap.series.push_back(b);
      gap.x_tick_labels.push_back(names[i]);
    }
  }
  if (!share.series.empty()) f.parts.push_back(share);
  if (!gap.series.empty()) f.parts.push_back(gap);
  return f;
}

}  // namespace kvscope::viewers
