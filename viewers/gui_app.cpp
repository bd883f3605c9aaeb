#include "viewers/gui_app.h"

#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>
#include <imgui_internal.h>
#include <implot.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "viewers/dock_layout.h"
#include "viewers/figure_export.h"
#include "viewers/layer_stats_plot.h"
#include "viewers/panel.h"
#include "viewers/quality_panel.h"
#include "viewers/rasteriser_threads.h"
#include "viewers/redraw_gate.h"
#include "viewers/run_choice.h"
#include "viewers/samples_panel.h"
#include "viewers/script.h"
#include "viewers/session.h"
#include "viewers/setup_panel.h"
#include "viewers/stale_runs.h"
#include "viewers/views.h"
#include "viewers/wheel_zoom.h"

namespace kvscope::viewers {

namespace {

using Clock = std::chrono::steady_clock;

// Frame times, split by whether a run was in progress: the number that matters is how smooth the
// window stays while the worker computes.
struct FrameStats {
  int frames = 0, busy_frames = 0, busy_drawn = 0, drawn = 0;
  double busy_work_ms = 0, busy_interval_ms = 0, busy_max_work_ms = 0, busy_max_interval_ms = 0;
  double idle_work_ms = 0;
  double ui_ms = 0;  // building the frame (panels, ImGui, ImPlot), without OpenGL rendering and swap
  // What the status bar shows, refreshed once a second: a number that changed every frame would make
  // every frame differ from the one on screen and defeat the redraw gate.
  double shown_drawn_per_s = 0, shown_frames_per_s = 0;
  double second_ms = 0;
  int second_frames = 0, second_drawn = 0;
  void add(bool busy, bool frame_drawn, double work_ms, double interval_ms, double frame_ui_ms) {
    ++frames;
    second_ms += interval_ms;
    ++second_frames;
    second_drawn += frame_drawn;
    if (second_ms >= 1000.0) {
      shown_frames_per_s = 1000.0 * second_frames / second_ms;
      shown_drawn_per_s = 1000.0 * second_drawn / second_ms;
      second_ms = 0;
      second_frames = second_drawn = 0;
    }
    drawn += frame_drawn;
    ui_ms += frame_ui_ms;
    if (busy) {
      ++busy_frames;
      busy_drawn += frame_drawn;
      busy_work_ms += work_ms;
      busy_interval_ms += interval_ms;
      busy_max_work_ms = std::max(busy_max_work_ms, work_ms);
      busy_max_interval_ms = std::max(busy_max_interval_ms, interval_ms);
    } else {
      idle_work_ms += work_ms;
    }
  }
  void report() const {
    const int idle = frames - busy_frames;
    std::fprintf(stderr, "kvscope gui: %d frames, %d drawn (the others equalled the frame on screen); during runs %d "
                         "frames, %d drawn, %.1f fps (mean frame interval %.1f ms, longest %.1f ms), frame work mean "
                         "%.1f ms, max %.1f ms; idle frames %d, work mean %.1f ms; building the UI %.1f ms of each "
                         "frame on average (the rest is OpenGL)\n",
                 frames, drawn, busy_frames, busy_drawn, busy_frames ? 1000.0 * busy_frames / busy_interval_ms : 0.0,
                 busy_frames ? busy_interval_ms / busy_frames : 0.0, busy_max_interval_ms,
                 busy_frames ? busy_work_ms / busy_frames : 0.0, busy_max_work_ms, idle,
                 idle ? idle_work_ms / idle : 0.0, frames ? ui_ms / frames : 0.0);
  }
};

// What a window's background looks like on screen (ImGuiCol_WindowBg blended over the old clear colour):
// the frame is cleared to it, so docked windows need not paint their background.
ImVec4 clear_color() {
  const ImVec4 bg = ImGui::GetStyle().Colors[ImGuiCol_WindowBg];
  const ImVec4 under(0.08f, 0.08f, 0.09f, 1.0f);
  return ImVec4(bg.x * bg.w + under.x * (1 - bg.w), bg.y * bg.w + under.y * (1 - bg.w), bg.z * bg.w + under.z * (1 - bg.w), 1.0f);
}

// Set by GLFW when the window was uncovered or resized and its pixels must be drawn again.
std::atomic<bool> g_window_exposed{false};

Image read_framebuffer(int w, int h) {
  Image img(w, h);
  std::vector<uint8_t> rows(static_cast<std::size_t>(w) * h * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, rows.data());
  // OpenGL's origin is the bottom-left corner; PNG rows run top-down.
  for (int y = 0; y < h; ++y)
    std::copy_n(rows.data() + static_cast<std::size_t>(h - 1 - y) * w * 4, static_cast<std::size_t>(w) * 4, img.px(0, y));
  for (std::size_t i = 3; i < img.rgba.size(); i += 4) img.rgba[i] = 255;
  return img;
}

// Scales the remembered sizes of a dock node and every node under it by `factor` (per axis).
void scale_dock_sizes(ImGuiDockNode* node, ImVec2 factor) {
  if (!node) return;
  node->SizeRef = ImVec2(node->SizeRef.x * factor.x, node->SizeRef.y * factor.y);
  node->Size = ImVec2(node->Size.x * factor.x, node->Size.y * factor.y);
  scale_dock_sizes(node->ChildNodes[0], factor);
  scale_dock_sizes(node->ChildNodes[1], factor);
}

// The confirm / Cancel row of a modal dialog: `confirm` runs on the first button (an error goes to the
// log), and either button closes the dialog.
void modal_buttons(const char* confirm_label, std::vector<std::string>& log, const std::function<void()>& confirm) {
  if (ImGui::Button(confirm_label, ImVec2(120, 0))) {
    try {
      confirm();
    } catch (const std::exception& e) {
      log.push_back(std::string("error: ") + e.what());
    }
    ImGui::CloseCurrentPopup();
  }
  ImGui::SameLine();
  if (ImGui::Button("Cancel", ImVec2(120, 0))) ImGui::CloseCurrentPopup();
}

class App {
 public:
  App(const GuiOptions& options, GLFWwindow* window)
      : options_(options), window_(window), session_(options.threads, options.worker_nice), setup_(session_) {
    state_.textures = &textures_;
    panels_ = make_view_panels();
    auto quality = std::make_unique<QualityPanel>(session_);
    quality_ = quality.get();
    panels_.push_back(std::move(quality));
    auto samples = std::make_unique<SamplesPanel>(session_);
    samples_ = samples.get();
    panels_.push_back(std::move(samples));
    register_panel_settings();
  }

  int run();
  // Where the layout was read from (empty: built in code); set before the first frame.
  void set_ini(const std::string& path) { ini_ = path; }

 private:
  // The open panels in Dear ImGui's ini file ([KvscopePanels][open], one `key=0|1` line per panel), beside its own
  // window sizes and docking.
  void register_panel_settings();
  void start();
  // Whether the command line set the first run's form (--prompt, --policy, --budget, --max-new-tokens).
  bool first_run_options_given() const;
  // The default form with the command line's --prompt, --policy, --budget and --max-new-tokens over it.
  void load_first_run_form();
  void apply_updates();
  void frame();
  void draw_menu();
  void draw_status_bar();
  void build_layout(ImGuiID dockspace);
  void draw_dialogs();
  void draw_log();
  Panel* panel(const std::string& key);
  void step_script();
  // Runs the (policy, budget) a panel asked for (AppState::run_choice) as the live run.
  void run_choice();
  // A red line over panel `key` when it shows runs of a policy file that no longer loads (stale_runs.h).
  void stale_banner(const std::string& key);
  void fail(const std::string& message);
  // One JSON object per line in the --timing-log file: {"t": seconds since start, "event": ..., fields}.
  void log_timing(const std::string& event, const nlohmann::json& fields = {});
  void export_panel(const std::string& key, const std::string& path, const ExportOptions& options);
  // A script's `status FILE`: the status bar's note, the latest plot read-out and the runs on screen, as text.
  void write_status(const std::string& path) const;
  // A script's `points FILE`: the Quality panel's Pareto points where the last frame drew them, in window pixels.
  void write_points(const std::string& path) const;

  GuiOptions options_;
  std::unique_ptr<AtomicFile> timing_;  // --timing-log, put in place when the window closes
  Clock::time_point started_ = Clock::now();
  GLFWwindow* window_;
  Session session_;
  GlTextureStore textures_;
  RedrawGate redraw_;
  AppState state_;
  SetupPanel setup_;
  std::vector<std::unique_ptr<Panel>> panels_;
  QualityPanel* quality_ = nullptr;  // one of panels_
  SamplesPanel* samples_ = nullptr;  // one of panels_
  bool layout_built_ = false;
  std::string layout_focus_;  // non-empty: the layout with this panel large
  bool quit_ = false;
  int exit_code_ = 0;
  FrameStats stats_;
  bool log_open_ = true;
  std::string ini_;  // the ini file in use, or empty

  // Dialog state.
  bool open_dialog_ = false, save_dialog_ = false, sweep_dialog_ = false, policy_dialog_ = false, samples_dialog_ = false;
  std::string open_path_ = "run.h5", save_path_ = "kvscope_run.h5", sweep_path_ = "sweep", policy_path_;
  std::string samples_path_ = "traces";
  std::string export_path_;
  int export_w_ = 1200, export_h_ = 800;
  float export_font_ = 0.0f;
  bool export_dark_ = false, export_matplotlib_ = false;
  std::string export_size_;  // "column" or "page" once chosen; empty: the width and height fields
  std::string export_for_;

  // Script state.
  std::vector<ScriptStep> script_;
  std::size_t next_step_ = 0;
  bool waiting_idle_ = false;
  Clock::time_point wait_deadline_{};
  std::string wait_file_;  // `wait-file`: the script goes on once this file exists (another program's turn)
  int frames_left_ = 0;
  std::string screenshot_path_;  // captured at the end of the next frame
  bool idle_at_frame_start_ = false;
  bool release_click_ = false;
  float restore_double_click_time_ = -1.0f;  // ImGui's own, while a scripted double-click is handled
  int frame_count_ = 0;
  int frames_since_input_ = 1000;
  ImVec2 layout_work_size_{0, 0};  // the dock space's size the nodes' sizes are for
  ImVec2 saved_layout_size_{0, 0};  // that size as the ini file read at start saved it (0: not given)
  float frame_wheel_ = 0.0f;  // io.MouseWheel of this frame, read after NewFrame()
};

void App::register_panel_settings() {
  ImGuiSettingsHandler h;
  h.TypeName = "KvscopePanels";
  h.TypeHash = ImHashStr(h.TypeName);
  h.UserData = this;
  h.ReadOpenFn = [](ImGuiContext*, ImGuiSettingsHandler*, const char* name) -> void* {
    return std::string(name) == "open" ? reinterpret_cast<void*>(1) : nullptr;
  };
  h.ReadLineFn = [](ImGuiContext*, ImGuiSettingsHandler* handler, void*, const char* line) {
    App& app = *static_cast<App*>(handler->UserData);
    const std::string text(line);
    const std::size_t eq = text.find('=');
    if (eq == std::string::npos) return;
    const std::string key = text.substr(0, eq);
    if (key == "layout_size") {  // the window's work area the saved dock sizes are in pixels of
      float w = 0, h = 0;
      if (std::sscanf(text.c_str() + eq + 1, "%fx%f", &w, &h) == 2 && w > 0 && h > 0) app.saved_layout_size_ = ImVec2(w, h);
      return;
    }
    const bool open = text.substr(eq + 1) == "1";
    if (key == "log") app.log_open_ = open;
    else if (Panel* p = app.panel(key)) p->open = open;  // a key from another version is ignored
  };
  h.WriteAllFn = [](ImGuiContext*, ImGuiSettingsHandler* handler, ImGuiTextBuffer* out) {
    App& app = *static_cast<App*>(handler->UserData);
    out->appendf("[%s][open]\n", handler->TypeName);
    out->appendf("setup=%d\n", app.setup_.open ? 1 : 0);
    for (const auto& p : app.panels_) out->appendf("%s=%d\n", p->key().c_str(), p->open ? 1 : 0);
    out->appendf("log=%d\n", app.log_open_ ? 1 : 0);
    if (app.layout_work_size_.x > 0 && app.layout_work_size_.y > 0)
      out->appendf("layout_size=%.0fx%.0f\n", app.layout_work_size_.x, app.layout_work_size_.y);
    out->appendf("\n");
  };
  ImGui::AddSettingsHandler(&h);
}

Panel* App::panel(const std::string& key) {
  if (key == "setup") return &setup_;
  for (auto& p : panels_)
    if (p->key() == key) return p.get();
  return nullptr;
}

void App::fail(const std::string& message) {
  std::fprintf(stderr, "kvscope gui: error: %s\n", message.c_str());
  state_.log.push_back("error: " + message);
  exit_code_ = 1;
  quit_ = true;
}

void App::start() {
  if (!options_.script.empty()) script_ = load_script(options_.script);  // parse errors are usage errors
  if (!options_.timing_log.empty()) {
    // The window replaces its own outputs (a benchmark reruns with one log name), never through a link.
    timing_ = std::make_unique<AtomicFile>(options_.timing_log, Existing::Replace, "timing log");
  }
  {
    // How the model shares the CPU with drawing decides how fast a live run finishes (app/openmp_wait_policy.h).
    const char* wait = std::getenv("OMP_WAIT_POLICY");
    const std::string line = "engine: " + std::to_string(session_.threads()) + " thread(s), OpenMP waits " +
                             (wait ? std::string(wait) : std::string("by spinning (libgomp default)"));
    state_.log.push_back(line);
    std::fprintf(stderr, "kvscope gui: %s\n", line.c_str());
  }
  if (!options_.model.empty()) setup_.set_model(options_.model);
  if (!options_.record.empty()) setup_.set_record(options_.record);
  for (const auto& f : options_.trace_files) session_.open_trace(f);
  if (!options_.samples_dir.empty()) {
    samples_->open_folder(options_.samples_dir);  // not a folder: an error before any frame
  }
  // --prompt, --policy, --budget and --max-new-tokens fill the form whenever they are given: the default run
  // uses it, and so do a script's `run` and `load-default` (a script that ran on a sample prompt while the
  // command line named another would measure the wrong thing).
  if (first_run_options_given()) load_first_run_form();
  const bool scripted_defaults = !script_.empty();
  if (options_.trace_files.empty() && options_.samples_dir.empty() && !options_.no_run && !scripted_defaults) {
    if (!first_run_options_given()) setup_.load_defaults();
    setup_.run();
  }
  if (!options_.screenshot.empty() && script_.empty()) {
    script_ = parse_script("wait\nframes 3\nscreenshot " + options_.screenshot + "\nquit\n", "--screenshot");
  }
}

bool App::first_run_options_given() const {
  return !options_.prompt.empty() || !options_.policy.empty() || !options_.budget.empty() || options_.max_new_tokens > 0 ||
         !options_.device.empty();
}

void App::load_first_run_form() {
  setup_.load_defaults();
  if (!options_.prompt.empty()) setup_.set_prompt(options_.prompt);
  if (!options_.policy.empty()) setup_.set_policy(options_.policy);
  if (!options_.budget.empty()) setup_.set_budget(options_.budget);
  if (options_.max_new_tokens > 0) setup_.set_tokens(options_.max_new_tokens);
  if (!options_.device.empty()) setup_.set_device(options_.device);
}

void App::log_timing(const std::string& event, const nlohmann::json& fields) {
  if (!timing_) return;
  nlohmann::json j = fields;
  j["t"] = std::chrono::duration<double>(Clock::now() - started_).count();
  j["event"] = event;
  timing_->write(j.dump() + "\n");
}

void App::apply_updates() {
  for (auto& u : session_.poll()) {
    if (timing_) {
      bool decided = false;  // the snapshot holds the end of prefill: what the policy kept is on screen
      for (const auto& st : u.run->steps) decided = decided || st.phase == 1 || st.seq_len >= u.run->prompt_length;
      log_timing(u.final ? "result" : "snapshot",
                 {{"slot", u.slot}, {"run", u.run->name}, {"steps", u.run->n_steps()}, {"decided", decided},
                  {"prefill", u.run->meta("prefill")}});
    }
    if (u.fidelity) {
      // The measurement belongs to the run it was made for, in every entry showing that run (the live slot
      // and copies kept for comparison); a newer run of the slot has none yet.
      for (auto& r : state_.runs)
        if (r.run == u.run) r.fidelity = u.fidelity;
      continue;
    }
    RunEntry e;
    e.run = u.run;
    e.slot = u.slot;
    e.source = u.source;
    e.in_progress = !u.final;
    e.request = u.request;
    const bool is_new = std::none_of(state_.runs.begin(), state_.runs.end(), [&](const RunEntry& r) { return r.slot == u.slot; });
    const int idx = state_.upsert(std::move(e));
    // The live run takes the screen when it first appears; baselines and files join quietly.
    if (state_.active < 0 || (is_new && u.slot == "live")) state_.active = idx;
    if (state_.active_run()) state_.sel = clamp(state_.sel, shape_of(*state_.active_run()));
  }
  for (auto& m : session_.take_messages()) {
    // Also on stderr, so scripted sessions leave a record of what ran, what was cancelled and why.
    std::fprintf(stderr, "kvscope gui: %s\n", m.c_str());
    state_.log.push_back(std::move(m));
  }
}

void App::build_layout(ImGuiID dockspace) {
  ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::DockBuilderRemoveNode(dockspace);
  ImGui::DockBuilderAddNode(dockspace, ImGuiDockNodeFlags_DockSpace);
  ImGui::DockBuilderSetNodeSize(dockspace, vp->WorkSize);
  if (Panel* focus = layout_focus_.empty() ? nullptr : panel(layout_focus_)) {
    // One panel large, the set-up form beside it, everything else tabbed behind the panel.
    ImGuiID left, main;
    ImGui::DockBuilderSplitNode(dockspace, ImGuiDir_Left, 0.2f, &left, &main);
    ImGui::DockBuilderDockWindow("Set-up", left);
    ImGui::DockBuilderDockWindow("Summary", left);
    ImGui::DockBuilderDockWindow("Log", left);
    for (auto& p : panels_)
      if (p.get() != focus) ImGui::DockBuilderDockWindow(p->title().c_str(), main);
    ImGui::DockBuilderDockWindow(focus->title().c_str(), main);
    ImGui::DockBuilderFinish(dockspace);
    state_.focus_panel = focus->key();
    return;
  }
  ImGuiID left, rest, setup, summary, tokens, upper, lower, top, stats, timeline, budget;
  const DockRatios r = dock_ratios(vp->WorkSize.x, vp->WorkSize.y, ImGui::GetFontSize());
  ImGui::DockBuilderSplitNode(dockspace, ImGuiDir_Left, r.left, &left, &rest);
  ImGui::DockBuilderSplitNode(left, ImGuiDir_Up, r.setup, &setup, &summary);
  ImGui::DockBuilderSplitNode(rest, ImGuiDir_Down, r.tokens, &tokens, &upper);
  if (r.stacked_right) {
    ImGuiID column;
    ImGui::DockBuilderSplitNode(upper, ImGuiDir_Right, r.stats, &column, &upper);
    ImGui::DockBuilderSplitNode(column, ImGuiDir_Down, 0.5f, &budget, &stats);
    ImGui::DockBuilderSplitNode(upper, ImGuiDir_Down, r.lower, &timeline, &top);
  } else {
    ImGui::DockBuilderSplitNode(upper, ImGuiDir_Down, r.lower, &lower, &top);
    ImGui::DockBuilderSplitNode(top, ImGuiDir_Right, r.stats, &stats, &top);
    ImGui::DockBuilderSplitNode(lower, ImGuiDir_Right, r.budget, &budget, &timeline);
  }
  ImGui::DockBuilderDockWindow("Set-up", setup);
  // The last window docked into a node is its visible tab.
  ImGui::DockBuilderDockWindow("Log", summary);
  ImGui::DockBuilderDockWindow("Summary", summary);
  ImGui::DockBuilderDockWindow("Similarity", top);
  ImGui::DockBuilderDockWindow("Quality", top);
  ImGui::DockBuilderDockWindow("Compare", top);
  ImGui::DockBuilderDockWindow("Attention", top);
  ImGui::DockBuilderDockWindow("Router", stats);
  ImGui::DockBuilderDockWindow("Samples", stats);
  ImGui::DockBuilderDockWindow("Layer stats", stats);
  ImGui::DockBuilderDockWindow("Budgets", budget);
  ImGui::DockBuilderDockWindow("Eviction timeline", timeline);
  ImGui::DockBuilderDockWindow("Tokens", tokens);
  ImGui::DockBuilderFinish(dockspace);
}

void App::draw_menu() {
  if (!ImGui::BeginMainMenuBar()) return;
  if (ImGui::BeginMenu("File")) {
    if (ImGui::MenuItem("Open trace...", "Ctrl+O")) open_dialog_ = true;
    if (ImGui::MenuItem("Open sweep...")) sweep_dialog_ = true;
    if (ImGui::MenuItem("Open samples...")) samples_dialog_ = true;
    if (ImGui::MenuItem("Load policy file...")) policy_dialog_ = true;
    if (ImGui::MenuItem("Save runs as HDF5...")) save_dialog_ = true;
    if (ImGui::BeginMenu("Export figure")) {
      for (auto& p : panels_)
        if (p->key() != "tokens" && ImGui::MenuItem(p->title().c_str())) state_.export_panel = p->key();
      ImGui::EndMenu();
    }
    if (ImGui::MenuItem("Screenshot (kvscope_screenshot.png)")) screenshot_path_ = "kvscope_screenshot.png";
    ImGui::Separator();
    if (ImGui::MenuItem("Quit", "Ctrl+Q")) quit_ = true;
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("View")) {
    ImGui::MenuItem("Set-up", nullptr, &setup_.open);
    for (auto& p : panels_) ImGui::MenuItem(p->title().c_str(), nullptr, &p->open);
    ImGui::MenuItem("Log", nullptr, &log_open_);
    ImGui::Separator();
    if (ImGui::BeginMenu("Large panel")) {
      for (auto& p : panels_)
        if (ImGui::MenuItem(p->title().c_str())) layout_focus_ = p->key(), layout_built_ = false;
      ImGui::EndMenu();
    }
    if (ImGui::MenuItem("Reset layout")) layout_focus_.clear(), layout_built_ = false;
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Run")) {
    if (ImGui::MenuItem("Run", "F5")) setup_.run();
    if (ImGui::MenuItem("Cancel")) session_.cancel_all();
    if (ImGui::MenuItem("Keep for comparison")) setup_.pin(state_);
    ImGui::EndMenu();
  }
  ImGui::EndMainMenuBar();
  const ImGuiIO& io = ImGui::GetIO();
  if (io.KeyCtrl && ImGui::IsKeyPressed(ImGuiKey_O)) open_dialog_ = true;
  if (io.KeyCtrl && ImGui::IsKeyPressed(ImGuiKey_Q)) quit_ = true;
  if (ImGui::IsKeyPressed(ImGuiKey_F5)) setup_.run();
}

void App::draw_status_bar() {
  const float h = ImGui::GetFrameHeight();
  if (ImGui::BeginViewportSideBar("##status", ImGui::GetMainViewport(), ImGuiDir_Down, h,
                                  ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_MenuBar)) {
    if (ImGui::BeginMenuBar()) {
      const SessionStatus st = session_.status();
      ImGui::Text("%s", st.model_name.empty() ? "no model loaded" : st.model_name.c_str());
      ImGui::Separator();
      if (st.busy) {
        // In 1% steps: finer moves are invisible at this width but would make each frame a new one to draw.
        // As wide as its text (a run's name and where its prefill is), so the text is never clipped.
        const char* task = st.task.empty() ? "working" : st.task.c_str();
        const float text_w = ImGui::CalcTextSize(task).x + ImGui::GetStyle().FramePadding.x * 2 + ImGui::GetFontSize();
        ImGui::ProgressBar(std::floor(st.fraction * 100.0f) / 100.0f, ImVec2(std::max(ImGui::GetFontSize() * 16, text_w), 0), task);
      } else {
        ImGui::TextDisabled("idle");
      }
      ImGui::Separator();
      ImGui::Text("%zu runs", state_.runs.size());
      if (const trace::RunTrace* r = state_.active_run()) {
        ImGui::Separator();
        ImGui::Text("showing %s  layer %d head %d%s", state_.run_name(state_.active).c_str(), state_.sel.layer, state_.sel.head,
                    state_.token >= 0 ? ("  token " + token_label(*r, state_.token)).c_str() : "");
      }
      if (!state_.status_note.empty()) {
        ImGui::Separator();
        ImGui::TextUnformatted(state_.status_note.c_str());
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", state_.status_note.c_str());
      }
      // Only while a run is in progress: idle, the rate moves between 3 and 4 frames a second, and each new number
      // made a frame to draw every second of an untouched window.
      if (st.busy) {
        const float right = ImGui::GetWindowWidth() - ImGui::GetFontSize() * 11;
        if (ImGui::GetCursorPosX() < right) ImGui::SetCursorPosX(right);
        ImGui::TextDisabled("%.0f fps, %.0f drawn/s", stats_.shown_frames_per_s, stats_.shown_drawn_per_s);
      }
      ImGui::EndMenuBar();
    }
  }
  ImGui::End();
}

void App::draw_log() {
  if (!log_open_) return;
  if (ImGui::Begin("Log", &log_open_)) {
    for (const auto& line : state_.log) {
      const bool err = line.rfind("error", 0) == 0;
      if (err) ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.45f, 0.4f, 1.0f));
      ImGui::TextWrapped("%s", line.c_str());
      if (err) ImGui::PopStyleColor();
    }
    if (ImGui::GetScrollY() >= ImGui::GetScrollMaxY()) ImGui::SetScrollHereY(1.0f);
  }
  ImGui::End();
}

void App::export_panel(const std::string& key, const std::string& path, const ExportOptions& options) {
  Panel* p = panel(key);
  if (!p) throw UsageError("no panel '" + key + "'");
  p->sync(state_);  // a panel never drawn (a hidden tab) exports what it would show
  const Figure f = p->figure(state_);
  if (f.empty()) throw Error("panel '" + p->title() + "' has nothing to export yet");
  export_figure(f, path, options, Existing::Replace);  // the export dialog's own path, as a screenshot's
  state_.log.push_back("exported " + p->title() + " to " + path);
}

void App::draw_dialogs() {
  if (open_dialog_) ImGui::OpenPopup("Open trace");
  open_dialog_ = false;
  if (ImGui::BeginPopupModal("Open trace", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 30);
    input_text("path", open_path_);
    // The .h5 files next to the working directory, the usual place `kvscope trace --out` writes to.
    std::error_code ec;
    std::vector<std::string> found;
    for (const auto& e : std::filesystem::directory_iterator(".", ec))
      if (e.is_regular_file() && e.path().extension() == ".h5") found.push_back(e.path().filename().string());
    std::sort(found.begin(), found.end());
    if (!found.empty() && ImGui::BeginListBox("##found", ImVec2(-1, ImGui::GetTextLineHeightWithSpacing() * 6))) {
      for (const auto& f : found)
        if (ImGui::Selectable(f.c_str(), f == open_path_)) open_path_ = f;
      ImGui::EndListBox();
    }
    modal_buttons("Open", state_.log, [&] { session_.open_trace(open_path_); });
    ImGui::EndPopup();
  }

  if (sweep_dialog_) ImGui::OpenPopup("Open sweep");
  sweep_dialog_ = false;
  if (ImGui::BeginPopupModal("Open sweep", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::TextUnformatted("A folder written by `kvscope sweep --out DIR`, or its rows.csv or eval.h5.");
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 30);
    input_text("path", sweep_path_);
    modal_buttons("Open", state_.log, [&] {
      quality_->open_file(sweep_path_);
      state_.focus_panel = quality_->key();
    });
    ImGui::EndPopup();
  }

  if (samples_dialog_) ImGui::OpenPopup("Open samples");
  samples_dialog_ = false;
  if (ImGui::BeginPopupModal("Open samples", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::TextUnformatted("A folder of per-sample traces written by `kvscope eval ruler|longbench|needle --traces DIR`.");
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 30);
    input_text("folder", samples_path_);
    modal_buttons("Open", state_.log, [&] {
      samples_->open_folder(samples_path_);
      state_.focus_panel = samples_->key();
    });
    ImGui::EndPopup();
  }

  if (policy_dialog_) ImGui::OpenPopup("Load policy file");
  policy_dialog_ = false;
  if (ImGui::BeginPopupModal("Load policy file", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    ImGui::TextUnformatted("A Python scorer (PATH.py with score(obs); docs/policies.md, \"Writing a policy\") or a plugin (.so).\n"
                           "Loading it runs its code. A Python file is reloaded and re-run whenever it is saved.");
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 30);
    input_text("path", policy_path_);
    // Policy files in the working directory and the shipped examples.
    std::vector<std::string> found;
    for (const std::filesystem::path& dir : {std::filesystem::path("."), std::filesystem::path(KVSCOPE_SOURCE_DIR) / "examples" / "policies"}) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.is_regular_file() && (e.path().extension() == ".py" || e.path().extension() == ".so"))
          found.push_back(dir == "." ? e.path().filename().string() : e.path().string());
    }
    std::sort(found.begin(), found.end());
    if (!found.empty() && ImGui::BeginListBox("##policies", ImVec2(-1, ImGui::GetTextLineHeightWithSpacing() * 6))) {
      for (const auto& f : found)
        if (ImGui::Selectable(f.c_str(), f == policy_path_)) policy_path_ = f;
      ImGui::EndListBox();
    }
    modal_buttons("Load", state_.log, [&] { setup_.choose_policy_file(policy_path_, state_); });
    ImGui::EndPopup();
  }

  if (save_dialog_) ImGui::OpenPopup("Save runs");
  save_dialog_ = false;
  if (ImGui::BeginPopupModal("Save runs", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    // As SetupPanel::save does it (docs/gui.md, Export): from memory, files' runs included, nothing re-run.
    ImGui::TextUnformatted("Writes every finished run on screen (live, baseline, kept runs and runs read from files) into\n"
                           "one file from memory, on a background thread; the model does not run again. The file is\n"
                           "what `kvscope trace` writes for those runs; runs sharing a name get _2, _3 ...");
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 30);
    input_text("file", save_path_);
    modal_buttons("Save", state_.log, [&] {
      const int n = setup_.save(state_, save_path_);
      state_.log.push_back("saving " + std::to_string(n) + " run(s) to " + save_path_ + " ...");
    });
    ImGui::EndPopup();
  }

  if (!state_.export_panel.empty()) {
    export_for_ = state_.export_panel;
    export_path_ = export_for_ + ".png";
    state_.export_panel.clear();
    ImGui::OpenPopup("Export figure");
  }
  if (ImGui::BeginPopupModal("Export figure", nullptr, ImGuiWindowFlags_AlwaysAutoResize)) {
    Panel* p = panel(export_for_);
    if (p) p->sync(state_);
    const Figure f = p ? p->figure(state_) : Figure{};
    ImGui::Text("%s", p ? p->title().c_str() : "?");
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 24);
    input_text("file (.png, .svg or .pdf)", export_path_);
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 12);
    if (ImGui::InputInt("width", &export_w_, 100)) export_size_.clear();
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 12);
    if (ImGui::InputInt("height", &export_h_, 100)) export_size_.clear();
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 12);
    ImGui::InputFloat("font px (0: auto)", &export_font_, 1.0f, 4.0f, "%.0f");
    ImGui::Checkbox("dark background (PNG)", &export_dark_);
    ImGui::Checkbox("matplotlib style", &export_matplotlib_);
    ImGui::TextDisabled("print sizes (300 dpi, 9 pt text, height to fit):");
    ImGui::SameLine();
    if (ImGui::SmallButton("column 3.3 in")) export_size_ = "column";
    ImGui::SameLine();
    if (ImGui::SmallButton("page 7 in")) export_size_ = "page";
    if (!export_size_.empty()) {
      ImGui::TextDisabled("size: %s (edit width or height for pixels)", export_size_.c_str());
    }
    modal_buttons("Export", state_.log, [&] {
      const FigureLook look = export_matplotlib_ ? FigureLook::Matplotlib : FigureLook::Kvscope;
      ExportOptions o = export_size_.empty() ? ExportOptions{export_w_, export_h_, export_font_, export_dark_, look}
                                             : sized_export(f, export_size_, look, 300, export_font_);
      o.dark = export_dark_;
      export_panel(export_for_, export_path_, o);
    });
    ImGui::EndPopup();
  }
}

void App::frame() {
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  ImGui::NewFrame();
  // Every notch counts, at a step that reaches single tokens in about ten (wheel_zoom.h).
  frame_wheel_ = ImGui::GetIO().MouseWheel;  // cleared when the frame ends
  ImPlot::GetInputMap().ZoomRate = wheel_zoom_rate(frame_wheel_);
  draw_menu();
  draw_status_bar();
  const ImGuiID dockspace = ImGui::GetID("kvscope_dock");
  if (!layout_built_) {
    // A layout read from the ini file (the first frame loads it) is the user's: kept. View > Reset layout rebuilds.
    const ImGuiDockNode* saved = frame_count_ == 0 && !ini_.empty() ? ImGui::DockBuilderGetNode(dockspace) : nullptr;
    if (saved && saved->IsSplitNode()) {
      state_.log.push_back("layout read from " + ini_);
      std::fprintf(stderr, "kvscope gui: layout read from %s\n", ini_.c_str());
      // Its sizes are pixels of the window it was saved from: a window of another size scales them below, as a
      // resize does (an ini without the size, from before, is taken as it is).
      if (saved_layout_size_.x > 0) {
        layout_work_size_ = saved_layout_size_;
        const ImVec2 work = ImGui::GetMainViewport()->WorkSize;
        if (work.x != saved_layout_size_.x || work.y != saved_layout_size_.y)
          std::fprintf(stderr, "kvscope gui: the layout was saved at %.0fx%.0f; scaled to %.0fx%.0f\n", saved_layout_size_.x,
                       saved_layout_size_.y, work.x, work.y);
      }
    } else {
      build_layout(dockspace);
    }
    layout_built_ = true;
  }
  {
    // A resized window keeps its panels' proportions. Docking gives the central node (the attention map's) whatever
    // the other nodes' remembered sizes leave, so shrinking the window to 1280x720 left the map a sliver and no
    // plot (issue 38): every node's remembered size scales with the window instead.
    const ImVec2 work = ImGui::GetMainViewport()->WorkSize;
    if (layout_work_size_.x > 0 && layout_work_size_.y > 0 && (work.x != layout_work_size_.x || work.y != layout_work_size_.y))
      scale_dock_sizes(ImGui::DockBuilderGetNode(dockspace), ImVec2(work.x / layout_work_size_.x, work.y / layout_work_size_.y));
    layout_work_size_ = work;
  }
  // The dock space's host window paints nothing: its nodes hold windows, and empty space shows the clear
  // colour, which is the windows' own background.
  ImGui::PushStyleColor(ImGuiCol_WindowBg, IM_COL32(0, 0, 0, 0));
  ImGui::PushStyleColor(ImGuiCol_DockingEmptyBg, IM_COL32(0, 0, 0, 0));
  ImGui::DockSpaceOverViewport(dockspace, ImGui::GetMainViewport());
  ImGui::PopStyleColor(2);

  auto window = [&](Panel& p) {
    if (!p.open) return;
    if (!state_.focus_panel.empty() && state_.focus_panel == p.key()) {
      ImGui::SetNextWindowFocus();
      state_.focus_panel.clear();
    }
    // A window docked in the main dock space fills its node with the colour the frame is cleared to
    // (clear_color()), so its background is not painted a second time: software OpenGL pays for every
    // pixel painted. A floating dock node keeps its background: it lies over other windows.
    const ImGuiWindow* previous = ImGui::FindWindowByName(p.title().c_str());
    const bool docked =
        previous && previous->DockNode && ImGui::DockNodeGetRootNode(previous->DockNode)->ID == dockspace;
    if (docked) ImGui::PushStyleColor(ImGuiCol_WindowBg, IM_COL32(0, 0, 0, 0));
    if (ImGui::Begin(p.title().c_str(), &p.open)) {
      stale_banner(p.key());
      p.draw(state_);
    }
    ImGui::End();
    if (docked) ImGui::PopStyleColor();
  };
  quality_->poll(state_);  // rows land and files finish reading while the panel is hidden too
  samples_->poll(state_);
  window(setup_);
  for (auto& p : panels_) window(*p);
  run_choice();
  draw_log();
  // A dock node shows the focused window's tab, so the first tabs are chosen by focusing them in turn,
  // a few frames apart (a node applies focus when it updates, once it has its tab bar).
  ++frame_count_;
  if (frame_count_ == 4) ImGui::SetWindowFocus("Summary");
  if (frame_count_ == 6) ImGui::SetWindowFocus("Attention");
  if (frame_count_ == 8 && !options_.samples_dir.empty()) ImGui::SetWindowFocus("Samples");  // gui --samples DIR
  draw_dialogs();
  ImGui::Render();
}

void App::stale_banner(const std::string& key) {
  // Panels of the active run, and panels of every run on screen; the set-up form, Quality and Samples show none.
  static const std::vector<std::string> single = {"attention", "similarity", "timeline", "tokens", "router"};
  static const std::vector<std::string> every = {"compare", "layer_stats", "budget", "summary"};
  const bool all_runs = std::find(every.begin(), every.end(), key) != every.end();
  if (!all_runs && std::find(single.begin(), single.end(), key) == single.end()) return;
  const std::string notice = stale_notice(state_, all_runs);
  if (notice.empty()) return;
  ImGui::PushStyleColor(ImGuiCol_Text, ImVec4(1.0f, 0.45f, 0.4f, 1.0f));
  ImGui::TextUnformatted(notice.c_str());  // one line, clipped at the panel's edge; the tooltip has it all
  ImGui::PopStyleColor();
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", notice.c_str());
}

void App::run_choice() {
  if (!state_.run_choice) return;
  const RunChoice choice = *state_.run_choice;
  state_.run_choice.reset();
  auto say = [&](const std::string& text, bool error = false) {
    state_.status_note = text;
    state_.log.push_back((error ? "error: " : "") + text);
    std::fprintf(stderr, "kvscope gui: %s%s\n", error ? "error: " : "", text.c_str());
  };
  const std::string from = choice.from.empty() ? "" : " (" + choice.from + ")";
  try {
    // A run of it already on screen is shown, not run a second time.
    const int shown = run_of_choice(state_, choice, setup_.request().prompt);
    if (shown >= 0) {
      state_.active = shown;
      say("showing " + state_.run_name(shown) + ": " + describe_choice(choice) + " is already on screen" + from);
      return;
    }
    setup_.set_policy(choice.policy);
    if (!choice.budget.empty()) setup_.set_budget(choice.budget);
    setup_.set_cache_type(choice_cache_type(choice));
    setup_.run();
    say("started " + describe_choice(choice) + " live" + from);
  } catch (const std::exception& e) {
    say("cannot run " + choice.policy + " at " + choice.budget + from + ": " + e.what(), true);
  }
}

void App::write_status(const std::string& path) const {
  std::string text = "status: " + state_.status_note + "\nhover: ";
  // A read-out of several lines stays on one line of the file.
  for (const char ch : state_.hover_note) text += ch == '\n' ? std::string(" | ") : std::string(1, ch);
  text += "\n";
  for (int i = 0; i < static_cast<int>(state_.runs.size()); ++i) {
    const RunEntry& e = state_.runs[i];
    text += "run: " + state_.run_name(i) + "\t" + e.slot + "\t" + (e.in_progress ? "running" : "done") +
            (i == state_.active ? "\tshown" : "") + "\n";
  }
  AtomicFile out(path, Existing::Replace, "status file");
  out.write(text);
  out.commit();
}

void App::write_points(const std::string& path) const {
  const auto& points = quality_->drawn_points();
  if (points.empty())
    throw UsageError("'points': the Quality panel drew no Pareto points in the last frame (view quality, "
                     "quality-x cache_bytes and a frame first)");
  // One point a line: x y (window pixels, from the top left), policy, budget, cache type (- for none), series.
  std::string text;
  char buf[64];
  for (const auto& p : points) {
    std::snprintf(buf, sizeof buf, "%.1f\t%.1f\t", p.x, p.y);
    text += buf + p.policy + "\t" + p.budget + "\t" + (p.cache_type.empty() ? "-" : p.cache_type) + "\t" + p.series +
            (p.on_front ? "\tfront" : "") + "\n";
  }
  AtomicFile out(path, Existing::Replace, "points file");
  out.write(text);
  out.commit();
}

void App::step_script() {
  if (quit_) return;
  if (waiting_idle_) {
    if (idle_at_frame_start_) {
      waiting_idle_ = false;
    } else if (Clock::now() > wait_deadline_) {
      fail("script: 'wait' timed out with a run still in progress");
      return;
    } else {
      return;
    }
  }
  if (!wait_file_.empty()) {
    if (std::filesystem::exists(wait_file_)) {
      wait_file_.clear();
    } else if (Clock::now() > wait_deadline_) {
      fail("script: 'wait-file' timed out: " + wait_file_ + " was not made");
      return;
    } else {
      return;
    }
  }
  if (release_click_) {
    ImGui::GetIO().AddMouseButtonEvent(ImGuiMouseButton_Left, false);
    release_click_ = false;
  }
  if (frames_left_ > 0) {
    --frames_left_;
    return;
  }
  if (restore_double_click_time_ >= 0) {
    ImGui::GetIO().MouseDoubleClickTime = restore_double_click_time_;
    restore_double_click_time_ = -1.0f;
  }
  if (!screenshot_path_.empty()) return;  // the capture happens at the end of the next frame
  while (next_step_ < script_.size() && !quit_) {
    const ScriptStep& s = script_[next_step_++];
    if (timing_) {
      std::string text = s.command;
      for (const auto& a : s.args) text += " " + a;
      log_timing("command", {{"text", text.size() > 80 ? text.substr(0, 80) : text}});
    }
    const std::string where = options_.script.empty() ? "script" : options_.script;
    try {
      const std::string& c = s.command;
      const std::string arg = s.args.empty() ? "" : s.args[0];
      if (c == "load-default") {
        load_first_run_form();  // the defaults, with what the command line set
        setup_.run();
      } else if (c == "prompt") {
        setup_.set_prompt(arg);
      } else if (c == "sample") {
        setup_.set_sample(arg);
      } else if (c == "policy") {
        setup_.set_policy(arg);
      } else if (c == "cache-type") {
        setup_.set_cache_type(arg);
      } else if (c == "cache-page") {
        setup_.set_cache_page(std::stoi(arg));
      } else if (c == "budget") {
        setup_.set_budget(arg);
      } else if (c == "tokens") {
        setup_.set_tokens(std::stoi(arg));
      } else if (c == "device") {
        setup_.set_device(arg);
      } else if (c == "run") {
        setup_.run();
      } else if (c == "pin") {
        apply_updates();
        setup_.pin(state_);
      } else if (c == "open") {
        session_.open_trace(arg);
      } else if (c == "save") {
        apply_updates();
        setup_.save(state_, arg);
      } else if (c == "layer") {
        state_.sel.layer = std::stoi(arg);
      } else if (c == "head") {
        state_.sel.head = std::stoi(arg);
      } else if (c == "token") {
        state_.token = std::stoi(arg);
      } else if (c == "step") {
        apply_updates();
        const int step = std::stoi(arg);
        const trace::RunTrace* run = state_.active_run();
        const int n = run ? run->n_steps() : 0;
        if (step < -1 || step >= n)
          throw UsageError("'step " + arg + "': the run shown has " + std::to_string(n) + " steps (0.." + std::to_string(n - 1) +
                           ", or -1 for the end)");
        state_.sel.step = step;
      } else if (c == "view") {
        state_.focus_panel = arg;
        frames_left_ = 2;  // a focus change takes effect on the next frame
        return;
      } else if (c == "layout") {
        layout_focus_ = arg == "default" ? "" : arg;
        layout_built_ = false;
        frames_left_ = 3;
        return;
      } else if (c == "wait") {
        waiting_idle_ = true;
        idle_at_frame_start_ = false;
        wait_deadline_ = Clock::now() + std::chrono::seconds(s.args.empty() ? 600 : std::stoi(arg));
        return;
      } else if (c == "frames") {
        frames_left_ = std::stoi(arg);
        return;
      } else if (c == "wait-file") {
        wait_file_ = arg;
        wait_deadline_ = Clock::now() + std::chrono::seconds(s.args.size() == 2 ? std::stoi(s.args[1]) : 600);
        return;
      } else if (c == "status") {
        apply_updates();
        write_status(arg);
      } else if (c == "points") {
        write_points(arg);
      } else if (c == "screenshot") {
        screenshot_path_ = arg;
        return;
      } else if (c == "export") {
        // The size as `kvscope figure --size` takes it (column, page, WxH, WxHin): one export path for both.
        Panel* p = panel(arg);
        export_panel(arg, s.args[1], sized_export(p ? p->figure(state_) : Figure{}, s.args.size() == 3 ? s.args[2] : "",
                                                  FigureLook::Kvscope));
      } else if (c == "mouse") {
        // A real pointer move (Xvfb warps its cursor), so hover read-outs behave as they do for a user.
        glfwSetCursorPos(window_, std::stoi(s.args[0]), std::stoi(s.args[1]));
        ImGui::GetIO().AddMousePosEvent(static_cast<float>(std::stoi(s.args[0])), static_cast<float>(std::stoi(s.args[1])));
        frames_left_ = 2;
        return;
      } else if (c == "show") {
        apply_updates();
        const int index = std::stoi(arg);
        if (index < 0 || index >= static_cast<int>(state_.runs.size()))
          throw UsageError("'show " + arg + "': there are " + std::to_string(state_.runs.size()) + " runs (0.." +
                           std::to_string(static_cast<int>(state_.runs.size()) - 1) + ")");
        state_.active = index;
      } else if (c == "zoom") {
        state_.attention_zoom = std::array<double, 4>{std::stod(s.args[0]), std::stod(s.args[1]), std::stod(s.args[2]), std::stod(s.args[3])};
        frames_left_ = 3;  // the limits apply next frame; the exact region follows them a frame later
        return;
      } else if (c == "lock-range") {
        state_.lock_color_range = arg == "on";
        state_.locked_scale.reset();
        frames_left_ = 2;
        return;
      } else if (c == "decode") {
        state_.attention_decode = arg == "on";
        frames_left_ = 2;
        return;
      } else if (c == "click") {
        ImGui::GetIO().AddMouseButtonEvent(ImGuiMouseButton_Left, true);
        release_click_ = true;
        frames_left_ = 2;
        return;
      } else if (c == "double-click") {
        // Press, release, press, release: ImGui takes one button event per frame, and software GL frames may lie
        // further apart than a person's double-click, so its double-click time is stretched until they are handled.
        ImGuiIO& io = ImGui::GetIO();
        restore_double_click_time_ = io.MouseDoubleClickTime;
        io.MouseDoubleClickTime = 10.0f;
        for (const bool down : {true, false, true, false}) io.AddMouseButtonEvent(ImGuiMouseButton_Left, down);
        frames_left_ = 6;
        return;
      } else if (c == "samples") {
        samples_->open_folder(arg);
        state_.focus_panel = samples_->key();
        frames_left_ = 2;  // a focus change takes effect on the next frame
        return;
      } else if (c == "samples-filter") {
        samples_->set_filter(parse_sample_filter(arg));
      } else if (c == "samples-sort") {
        const std::string direction = s.args.size() == 2 ? s.args[1] : "asc";
        if (direction != "asc" && direction != "desc")
          throw UsageError("samples-sort takes asc or desc after the column, not '" + direction + "'");
        samples_->sort_by(parse_sample_column(arg), direction == "asc");
        frames_left_ = 1;  // the header takes the sort on the next frame
        return;
      } else if (c == "select-sample") {
        samples_->poll(state_);
        samples_->select(std::stoi(arg), state_);
      } else if (c == "open-sweep") {
        quality_->open_file(arg);
      } else if (c == "sweep") {
        apply_updates();
        quality_->start_sweep(state_, s.args[0], s.args[1], s.args.size() == 3 ? std::stoi(s.args[2]) : 8);
      } else if (c == "log-y") {
        if (arg != "on" && arg != "off") throw UsageError("log-y takes on or off, not '" + arg + "'");
        quality_->set_log_y(arg == "on");
      } else if (c == "quality-x") {
        quality_->set_x_axis(arg);
      } else if (c == "stat") {
        for (auto& panel : panels_)
          if (auto* stats = dynamic_cast<LayerStatsPlot*>(panel.get())) stats->stat = arg;
      } else if (c == "metric") {
        quality_->poll(state_);
        quality_->set_metric(arg);
      } else if (c == "minus") {
        quality_->set_baseline(arg == "-" ? "" : arg);
      } else if (c == "save-file") {
        // An editor saving a file (a policy the window reloads): SRC's bytes over DST, stamped now.
        std::filesystem::copy_file(s.args[0], s.args[1], std::filesystem::copy_options::overwrite_existing);
        std::filesystem::last_write_time(s.args[1], std::filesystem::file_time_type::clock::now());
        setup_.check_policy_file_soon();
      } else if (c == "pick" && quality_->x_axis() != "budget") {
        // The Pareto view's point of (policy, budget, cache type), as a click on it.
        quality_->poll(state_);
        const std::string type = s.args.size() == 3 ? s.args[2] : "";
        const auto choice = quality_->pareto_choice(arg, s.args[1], type);
        if (!choice)
          throw UsageError("the Pareto view has no point for policy '" + arg + "' at budget '" + s.args[1] + "'" +
                           (type.empty() ? " without a cache type" : " with cache type '" + type + "'"));
        state_.run_choice = *choice;
        run_choice();  // now, so a following `wait` waits for it
      } else if (c == "pick") {
        quality_->poll(state_);
        if (s.args.size() == 3) throw UsageError("pick takes a cache type in the Pareto view (quality-x cache_bytes)");
        const QualityCurves& curves = quality_->curves();
        const auto b = std::find(curves.budgets.begin(), curves.budgets.end(), s.args[1]);
        const double y = b == curves.budgets.end() ? 0.0 : curves.mean(arg, *b, quality_->metric());
        const auto point = quality_->pick(static_cast<double>(b - curves.budgets.begin()), y, 1.0, 1.0);
        if (!point || point->policy != arg || point->budget != s.args[1])
          throw UsageError("the Quality panel has no point for policy '" + arg + "' at budget '" + s.args[1] + "'");
        state_.run_choice = quality_->choice(point->policy, point->budget);
        run_choice();  // now, so a following `wait` waits for it
      } else if (c == "resize") {
        // As a user dragging the window's corner: the layout must follow (issue 38: the map vanished).
        glfwSetWindowSize(window_, std::stoi(s.args[0]), std::stoi(s.args[1]));
        frames_left_ = 4;
        return;
      } else if (c == "panel") {
        Panel* p = panel(arg);
        if (!p) throw UsageError("no panel '" + arg + "'");
        if (s.args[1] != "on" && s.args[1] != "off") throw UsageError("panel takes on or off, not '" + s.args[1] + "'");
        p->open = s.args[1] == "on";
        frames_left_ = 2;
        return;
      } else if (c == "quit") {
        quit_ = true;
      }
      if (state_.active_run()) state_.sel = clamp(state_.sel, shape_of(*state_.active_run()));
    } catch (const std::exception& e) {
      fail(where + ":" + std::to_string(s.line) + ": " + s.command + ": " + e.what());
    }
  }
}

int App::run() {
  start();
  auto last = Clock::now();
  while (!glfwWindowShouldClose(window_) && !quit_) {
    const bool busy = !session_.idle();
    const bool scripted = next_step_ < script_.size() || waiting_idle_ || !wait_file_.empty() || frames_left_ > 0 ||
                          !screenshot_path_.empty();
    // Idle and unattended: sleep until input arrives, so an open window costs nothing. Not while Dear ImGui still
    // holds input events (it takes one key or click a frame: typed text waited 250 ms a character), nor for a few
    // frames after input (hover, release and the caret settle without a new event).
    const bool input_pending = GImGui->InputEventsQueue.Size > 0 || frames_since_input_ < 3;
    if (!busy && !scripted && !input_pending) glfwWaitEventsTimeout(0.25);
    else glfwPollEvents();
    const auto t0 = Clock::now();
    idle_at_frame_start_ = session_.idle() && !quality_->busy() && !samples_->busy();
    apply_updates();
    frame();
    const auto t_ui = Clock::now();
    const double ui_ms = std::chrono::duration<double, std::milli>(t_ui - t0).count();
    const bool exposed = g_window_exposed.exchange(false);
    const bool input = GImGui->InputEventsTrail.Size > 0;  // events NewFrame() handled this frame
    frames_since_input_ = input ? 0 : std::min(frames_since_input_ + 1, 1000);
    const bool draw = redraw_.should_draw(*ImGui::GetDrawData(), textures_.generation(), input,
                                          exposed || !screenshot_path_.empty() || options_.redraw_every_frame,
                                          std::chrono::duration<double, std::milli>(t_ui - started_).count(), ui_ms);
    int w = 0, h = 0;
    glfwGetFramebufferSize(window_, &w, &h);
    if (draw) {
      glViewport(0, 0, w, h);
      const ImVec4 clear = clear_color();
      glClearColor(clear.x, clear.y, clear.z, 1.0f);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    }
    if (!screenshot_path_.empty()) {
      try {
        write_png(read_framebuffer(w, h), screenshot_path_, Existing::Replace);
        state_.log.push_back("screenshot saved to " + screenshot_path_);
        std::fprintf(stderr, "kvscope gui: screenshot %s (%dx%d)\n", screenshot_path_.c_str(), w, h);
      } catch (const std::exception& e) {
        fail(e.what());
      }
      screenshot_path_.clear();
    }
    if (draw) glfwSwapBuffers(window_);
    const auto t1 = Clock::now();
    const double work = std::chrono::duration<double, std::milli>(t1 - t0).count();
    step_script();
    // 60 Hz at most: the model shares the CPU with the window, and vsync does not throttle under Xvfb.
    const auto target = t0 + std::chrono::microseconds(16667);
    if (Clock::now() < target) std::this_thread::sleep_until(target);
    const auto now = Clock::now();
    const double interval_ms = std::chrono::duration<double, std::milli>(now - last).count();
    stats_.add(busy, draw, work, interval_ms, ui_ms);
    nlohmann::json frame_fields = {{"interval_ms", interval_ms}, {"busy", busy}, {"drawn", draw}, {"work_ms", work}, {"ui_ms", ui_ms}};
    if (frame_wheel_ != 0.0f) frame_fields["wheel"] = frame_wheel_;  // wheel notches this frame handled
    log_timing("frame", frame_fields);
    last = now;
  }
  stats_.report();
  if (timing_) timing_->commit();
  return exit_code_;
}

void glfw_error(int code, const char* text) { std::fprintf(stderr, "kvscope gui: GLFW error %d: %s\n", code, text); }

}  // namespace

std::string default_ini_path() {
  const char* config = std::getenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  if (config && *config) return (std::filesystem::path(config) / "kvscope" / "imgui.ini").string();
  if (home && *home) return (std::filesystem::path(home) / ".config" / "kvscope" / "imgui.ini").string();
  return "";
}

int run_gui(const GuiOptions& options) {
  // Scripts are parsed before a window opens, so a typo fails fast with a usage error.
  if (!options.script.empty()) (void)load_script(options.script);
  // --screenshot is a script of its own (wait, screenshot, quit); beside a script it would be dropped unseen.
  if (!options.script.empty() && !options.screenshot.empty())
    throw UsageError("--screenshot cannot be combined with --script: put `screenshot " + options.screenshot +
                     "` in the script where the picture should be taken");
  const std::string rasteriser = share_cpu_with_rasteriser(Session::engine_threads(options.threads));
  if (!rasteriser.empty()) std::fprintf(stderr, "kvscope gui: %s\n", rasteriser.c_str());
  glfwSetErrorCallback(glfw_error);
  if (!glfwInit())
    throw Error("cannot open a window: GLFW failed to initialise (no display? set DISPLAY, or run under "
                "`xvfb-run -a -s \"-screen 0 1600x1000x24\" kvscope gui ...`)");
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
  GLFWwindow* window = glfwCreateWindow(options.width, options.height, "kvscope", nullptr, nullptr);
  if (!window) {
    glfwTerminate();
    throw Error("cannot open a " + std::to_string(options.width) + "x" + std::to_string(options.height) +
                " OpenGL 3 window (no display, or no OpenGL 3 driver)");
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(1);
  // The redraw gate skips unchanged frames, so a window uncovered by another one must be drawn again.
  glfwSetWindowRefreshCallback(window, [](GLFWwindow*) { g_window_exposed = true; });

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImPlot::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.ConfigFlags |= ImGuiConfigFlags_DockingEnable | ImGuiConfigFlags_NavEnableKeyboard;
  // The layout persists in an ini file between interactive sessions; a scripted one (tests, screenshots) builds it in
  // code, so it looks the same on every machine, unless --ini names a file.
  std::string ini = options.ini;
  if (ini.empty() && options.script.empty() && options.screenshot.empty()) ini = default_ini_path();
  if (!ini.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(ini).parent_path(), ec);
  }
  io.IniFilename = ini.empty() ? nullptr : ini.c_str();
  io.Fonts->AddFontDefaultVector();
  ImGui::StyleColorsDark();
  ImPlot::StyleColorsDark();
  // A plot's frame is not filled: it would paint every plot's area a second time under its plot background
  // (software OpenGL pays per pixel painted), for a 7 % lighter margin around the axes.
  ImPlot::GetStyle().Colors[ImPlotCol_FrameBg] = ImVec4(0, 0, 0, 0);
  ImGuiStyle& style = ImGui::GetStyle();
  style.FontSizeBase = 15.0f;
  style.WindowRounding = 3.0f;
  style.FrameRounding = 2.0f;
  style.TabRounding = 2.0f;
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 130");

  int code = 0;
  std::exception_ptr error;
  {
    // The app (and its OpenGL textures) must die while the context is still current.
    App app(options, window);
    app.set_ini(ini);
    try {
      code = app.run();
    } catch (...) {
      error = std::current_exception();
    }
    // The layout is saved while the app that writes its open panels is alive; the context must not call into it
    // once it is gone (DestroyContext saves the ini file too).
    if (io.IniFilename) ImGui::SaveIniSettingsToDisk(io.IniFilename);
    io.IniFilename = nullptr;
    ImGui::RemoveSettingsHandler("KvscopePanels");
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImPlot::DestroyContext();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  if (error) std::rethrow_exception(error);
  return code;
}

}  // namespace kvscope::viewers
