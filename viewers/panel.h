#pragma once
// What every panel shares: the runs on screen, the selection that links panels (layer, head, step and
// the selected token), the colour settings, and a few widgets. Panels read runs only through
// std::shared_ptr<const RunTrace>, the immutable model the Session publishes.
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/eval/evidence.h"
#include "core/trace/trace_view.h"
#include "viewers/colormap.h"
#include "viewers/figure.h"
#include "viewers/texture.h"
#include "viewers/view_model.h"

namespace kvscope::eval {
struct FidelityResult;
}

namespace kvscope::viewers {

struct RunRequest;

struct RunEntry {
  std::shared_ptr<const trace::RunTrace> run;
  std::string slot;    // "live", "baseline", "pin1", or "<file>#<run>"
  std::string source;  // "live" or the trace file
  bool in_progress = false;
  std::shared_ptr<const RunRequest> request;  // what produced a live run, for saving it (null for files)
  // The run's fidelity to the full cache on its prompt (teacher-forced, as `kvscope eval fidelity`),
  // once the worker measured it after the run; null before, for files and for the full cache itself.
  std::shared_ptr<const eval::FidelityResult> fidelity;
};

// A (policy, budget, cache type) some panel asks for as the live run (a click on a quality curve or a Pareto point):
// the window shows the run of it on screen, or has the set-up form run it (viewers/run_choice.h).
struct RunChoice {
  std::string policy, budget;
  std::string cache_type;  // as kernels::parse_cache_types reads it; empty: float32 (a sweep's default)
  std::string from;        // what asked, for the status line: "Pareto point", "quality curve"
};

struct AppState {
  std::vector<RunEntry> runs;
  int active = -1;         // the run single-run panels show
  Selection sel;           // layer, query head, step (-1: last)
  int token = -1;          // selected position, highlighted everywhere (-1: none)
  ScaleKind scale = ScaleKind::Log;
  Colormap cmap = Colormap::Viridis;
  // "lock range": every attention map (any layer, head, run, the compare columns) keeps the colour range of the
  // map shown when the lock was set, so colours compare across them. locked_scale is taken by the first map
  // drawn after the lock is set (or after the scale kind changes).
  bool lock_color_range = false;
  std::optional<ColorScale> locked_scale;
  std::vector<int> compare;   // runs in the comparison, in column order
  bool compare_auto = true;   // until the user picks: the runs of the active run's prompt, baseline first
  LinkedSelection compare_sel;
  TextureStore* textures = nullptr;
  std::vector<std::string> log;
  std::string export_panel;   // non-empty: open the export dialog for this panel's figure
  std::string focus_panel;    // non-empty: bring this panel's window to the front next frame
  std::optional<RunChoice> run_choice;  // set by a panel; the window runs it and clears it
  std::string status_note;  // what the window last did for the user (a run_choice started), in the status bar
  // The latest read-out a plot showed under the pointer (a tooltip's text), for a script's `status` (real-pointer
  // tests read what a user would have seen).
  std::string hover_note;
  // Keys [0], [1] across and rows [2], [3] down that the attention map shows next (a script's `zoom`), then cleared.
  std::optional<std::array<double, 4>> attention_zoom;
  // The attention map's decode switch as a script set it (`decode on|off`), then cleared by the panel.
  std::optional<bool> attention_decode;
  // The evidence spans of the sample the Samples panel selected (issue 35), marked on the token axes of the runs
  // read from evidence_source, the sample's trace file.
  std::string evidence_source;
  std::vector<eval::EvidenceSpan> evidence;
  // Policy files (by path, as the runs' specs name them) that do not load as saved now, and why: the runs of
  // such a file are of its previous version (viewers/stale_runs.h). Set and cleared by the set-up form.
  std::map<std::string, std::string> policy_file_errors;

  const trace::RunTrace* active_run() const {
    return active >= 0 && active < static_cast<int>(runs.size()) ? runs[active].run.get() : nullptr;
  }
  // The evidence spans to mark on run i's token axes: the selected sample's when run i is from its file, else null.
  const std::vector<eval::EvidenceSpan>* evidence_of(int i) const {
    return i >= 0 && i < static_cast<int>(runs.size()) && !evidence.empty() && runs[i].source == evidence_source
               ? &evidence
               : nullptr;
  }
  const trace::RunTrace* run(int i) const {
    return i >= 0 && i < static_cast<int>(runs.size()) ? runs[i].run.get() : nullptr;
  }
  // Replaces the run of the same slot (keeping its place) or appends; returns its index.
  int upsert(RunEntry entry);
  // Run i's name as tables and legends show it: unique among the shown runs, with a prompt tag when they are of
  // several prompts (viewers/run_names.h).
  std::string run_name(int i) const;
};

class Panel {
 public:
  Panel(std::string key, std::string title) : key_(std::move(key)), title_(std::move(title)) {}
  virtual ~Panel() = default;
  const std::string& key() const { return key_; }      // the name scripts and the CLI use
  const std::string& title() const { return title_; }  // the window title (docking id)
  // Draws the panel's contents inside its window.
  virtual void draw(AppState& state) = 0;
  // What the panel shows now, for export; empty when it has nothing exportable.
  virtual Figure figure(const AppState& /*state*/) { return {}; }
  // Brings what the panel keeps in the shared state up to date without drawing (Compare's columns), so an export
  // of a panel never drawn yet shows what drawing it would. draw() does it too.
  virtual void sync(AppState& /*state*/) {}
  bool open = true;

 private:
  std::string key_, title_;
};

// --- shared widgets --------------------------------------------------------------------------------

// "name (policy, budget)" for menus.
std::string run_label(const AppState& state, int i);
// Combo over all runs; returns true when the choice changed.
bool run_combo(const char* label, const AppState& state, int& index, float width = 220.0f);
// Layer and query-head sliders for `shape`; true when either changed.
bool layer_head_sliders(Selection& sel, const RunShape& shape, bool heads = true, const char* head_label = "head");
// Layer and KV-head sliders on the shared selection: the KV head shown is the selected query head's, and choosing
// one selects the first query head of its group. True when either changed.
bool layer_kv_head_sliders(AppState& state, const RunShape& shape);
// The KV head a per-KV-head panel shows: `fixed` when >= 0 (kvscope figure --kv-head), else the selected query
// head's.
int selected_kv_head(const AppState& state, const RunShape& shape, int fixed);
// Step selector (prefill blocks, then decode steps) bound to state.sel.step; the last step stores -1 (the end, which
// follows a live run). True when it changed.
bool step_slider(AppState& state, const trace::RunTrace& run);
// Text boxes that edit a std::string in place (ImGui edits a char buffer; the string grows as needed).
bool input_text(const char* label, std::string& s);
bool input_multiline(const char* label, std::string& s, float width, float height);
// "#12 'the'" for position p of a run (prompt first, then generated tokens).
std::string token_label(const trace::RunTrace& run, int position);
const char* entry_state_name(EntryState s);
// Scale and colormap pickers bound to the shared state.
void color_controls(AppState& state);
// With the range locked and no lock held for its scale kind: takes `plot`'s range as the lock (the map on screen).
void capture_color_lock(AppState& state, const HeatmapPlot& plot);
// With a lock held for `plot`'s scale kind: gives `plot` the locked range, and a signature that says so (the
// texture cache).
void apply_color_lock(const AppState& state, HeatmapPlot& plot);
// The part of a plot cache key that changes with the lock.
std::string color_lock_signature(const AppState& state);
// A small "Export..." button that opens the export dialog for this panel.
void export_button(AppState& state, const std::string& panel_key);
// Text in the middle of the remaining space (empty panels).
void centered_hint(const char* text);

}  // namespace kvscope::viewers

namespace kvscope::viewers {
// Inside a plot: a left click that was not a pan (ImPlot pans with the left button).
bool plot_clicked();
// Inside a plot: thin guides at source coordinate `position` (vertical at x, and horizontal at y when
// `horizontal`), marking the selected token on maps whose axes are positions.
void token_guides(int position, bool horizontal);
// Inside a plot whose rows are steps: two lines framing row `row` (the selected step), in a colour of its own.
void step_guides(int row);
// Inside a plot whose x axis is key positions: a translucent band over each evidence span, in its kind's colour,
// and, with the pointer over one, a tooltip line naming the kind and the span.
void evidence_bands(const std::vector<eval::EvidenceSpan>& spans);
// The colour evidence of `kind` is marked in ("needle value", "needle key", "chain", ...), RGBA bytes.
unsigned evidence_color(const std::string& kind);
// The kinds of the spans holding `position`, joined by ", "; empty when none does.
std::string evidence_kinds_at(const std::vector<eval::EvidenceSpan>& spans, int position);
}  // namespace kvscope::viewers

namespace kvscope::viewers {
// Toolbars: continue on the same line when an item `width` pixels wide still fits, else wrap.
void same_line_if_fits(float width);
// Width of a checkbox with `label`, for same_line_if_fits.
float checkbox_width(const char* label);
}  // namespace kvscope::viewers
