// kvscope gui: the Dear ImGui front end. With trace files it shows them; without, it loads the default
// model and a sample prompt and starts a run, so the first screen is real data.
#include <cstdio>

#include "app/number_checks.h"
#include "app/openmp_wait_policy.h"
#include "app/run_options.h"
#include "app/subcommands.h"
#include "core/common/error.h"
#ifdef KVSCOPE_HAVE_GUI
#include "core/trace/recorder.h"
#include "viewers/gui_app.h"
#endif

namespace kvscope::app {

Command register_gui(CLI::App& root) {
#ifdef KVSCOPE_HAVE_GUI
  auto opts = std::make_shared<viewers::GuiOptions>();
#endif
  CLI::App* cmd = root.add_subcommand("gui", "open the interactive viewer (runs live, or shows HDF5 traces)");
#ifdef KVSCOPE_HAVE_GUI
  cmd->add_option("traces", opts->trace_files, "HDF5 trace files to open")->check(CLI::ExistingFile);
  cmd->add_option("--samples", opts->samples_dir,
                  "open an evaluation's per-sample trace folder (eval ... --traces DIR) in the Samples panel")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--script", opts->script, "run a scripted session (see docs/gui.md)")->check(CLI::ExistingFile);
  cmd->add_option("--screenshot", opts->screenshot, "save the first screen as PNG once the first run is done, then quit");
  cmd->add_option("--width", opts->width, "window width")->check(CLI::Range(320, 8192));
  cmd->add_option("--height", opts->height, "window height")->check(CLI::Range(240, 8192));
  cmd->add_option("--threads", opts->threads, "engine threads (0: all cores, one left for the window on 4+ cores)")
      ->check(kNonNegative);
  cmd->add_option("--model", opts->model, "GGUF file or Hugging Face folder for live runs (default: $KVSCOPE_MODEL, then SmolLM2-135M-Instruct)");
  cmd->add_option("--prompt", opts->prompt, "prompt of the first run (default: a sample prompt)");
  cmd->add_option("--policy", opts->policy, "policy of the first run, e.g. snapkv:window=32");
  add_budget_options(cmd, opts->budget, "budget of the first run (tokens or a percentage, default 25%)");
  cmd->add_option("--max-new-tokens", opts->max_new_tokens, "tokens the first run generates")->check(kPositive);
  cmd->add_option("--device", opts->device, "compute backend of the window's runs: cpu (default) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--no-run", opts->no_run, "do not start the default run");
  cmd->add_flag("--redraw-every-frame", opts->redraw_every_frame,
                "draw every frame even when nothing on screen changed (compare the redraw gate's cost)");
  cmd->add_option("--worker-nice", opts->worker_nice,
                  "how far below the window's CPU priority the model worker runs (0-19; 0: the same)")
      ->check(CLI::Range(0, 19));
  cmd->add_option("--timing-log", opts->timing_log,
                  "write one JSON line per script step, result shown and frame, with seconds since start (benchmarks)");
  cmd->add_option("--ini", opts->ini,
                  "where the layout (panel sizes, docking, open panels) persists between sessions (default: "
                  "~/.config/kvscope/imgui.ini; scripted sessions use none unless given)");
  cmd->add_option("--record", opts->record,
                  "what live runs record, as `kvscope trace --record` (default 'qk=on': exact attention at any zoom; "
                  "'qk=off' saves memory and time on long prompts, zoom then shows the pooled map; 'qk=layers:0-3,14' keeps "
                  "those layers' q/k only)");
  return {cmd, [opts]() {
            if (!opts->record.empty()) trace::RecordOptions::parse(opts->record);  // fails before the window opens
            prefer_passive_openmp_wait();
            return viewers::run_gui(*opts);
          }};
#else
  cmd->allow_extras();
  return {cmd, []() -> int {
            throw Error("this kvscope was built without the GUI (Dear ImGui sources or GLFW/OpenGL were missing at "
                        "configure time; run scripts/setup_deps.sh and rebuild)");
          }};
#endif
}

}  // namespace kvscope::app
