#pragma once
// The kvscope window: GLFW + OpenGL 3 + Dear ImGui (docking) + ImPlot. It owns the Session (model runs
// on a worker thread), the panels, the export and open dialogs, and the script runner.
#include <string>
#include <vector>

namespace kvscope::viewers {

// How far below the window's CPU priority the worker runs (background_priority.h). 0: measured with
// bench/slider_latency.py, nice 10 made results slower (median 1.07 s against 0.77 s) and did not raise the
// lowest frame rate, once unchanged frames were no longer drawn.
inline constexpr int kDefaultWorkerNice = 0;

struct GuiOptions {
  std::vector<std::string> trace_files;  // opened at start; without any, the default run starts
  std::string samples_dir;               // --samples DIR: an evaluation's trace folder for the Samples panel
  std::string script;                    // --script FILE
  std::string screenshot;                // --screenshot PATH: first screen to PNG, then quit
  int width = 1600, height = 1000;
  int threads = 0;                       // engine threads (0: automatic)
  std::string model;                     // model path for the default run
  std::string prompt;                    // prompt text for the default run (empty: a sample)
  std::string policy;                    // policy spec for the default run (empty: automatic)
  std::string budget;                    // budget for the default run (empty: 25%)
  int max_new_tokens = 0;                // 0: automatic
  std::string device;                    // compute backend of live runs, "cpu" or "cuda" (empty: cpu)
  bool no_run = false;                   // open the window without starting the default run
  std::string timing_log;                // --timing-log FILE: JSON lines of script steps, results shown, frames
  bool redraw_every_frame = false;       // draw frames identical to the one on screen too (redraw_gate.h)
  int worker_nice = kDefaultWorkerNice;  // the model worker's CPU priority below the window's
  std::string record;                    // what live runs record (trace::RecordOptions); empty: RunRequest's
  // --ini FILE: where panel sizes, docking and open panels persist between sessions (Dear ImGui's ini file). Empty:
  // default_ini_path() for an interactive session; a scripted or --screenshot one uses none, so it looks the same
  // on every machine.
  std::string ini;
};

// $XDG_CONFIG_HOME/kvscope/imgui.ini, else ~/.config/kvscope/imgui.ini; empty when neither is set.
std::string default_ini_path();

// Runs until the window closes or a script quits. Returns the process exit code (0 ok, 1 a script step
// failed or timed out). Throws Error when no window can be opened (no display).
int run_gui(const GuiOptions& options);

}  // namespace kvscope::viewers
