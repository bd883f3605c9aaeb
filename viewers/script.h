#pragma once
// Scripted sessions (`kvscope gui --script FILE`): one command per line, run in order by the window,
// so demos, screenshots and end-to-end tests drive the real GUI the way a user would.
//
//   # comment
//   load-default              default model, a sample prompt, the default policy; starts a run
//   prompt TEXT...            set the prompt text            sample NAME     a sample prompt
//   policy SPEC               e.g. snapkv:window=32          budget TEXT     e.g. 64 or 25%
//   tokens N                  new tokens per run             run             start a run (latest wins)
//   pin                       keep the current run for comparison
//   open PATH                 read an HDF5 trace             save PATH       the live runs, into one HDF5 file
//   layer L | head H | token P | step S                      select, in every panel
//   view NAME                 bring a panel to the front (attention, similarity, layer_stats, budget,
//                             timeline, tokens, summary, compare, quality, setup)
//   layout NAME | layout default  one panel large (set-up beside it) | the usual layout
//   mouse X Y | click         move the pointer to window pixel (X, Y) | left click there (hover read-outs)
//   wait [SECONDS]            until no run is queued or running (default 600 s; fails on timeout)
//   frames N                  render N frames
//   screenshot PATH           save the window as PNG         export VIEW PATH [SIZE]  a panel's figure (SIZE: WxH, WxHin, column, page)
//   open-sweep PATH           read a sweep (folder, rows.csv or eval.h5) into the Quality panel
//   sweep POLICIES BUDGETS [N]  a fidelity sweep on the live run's prompt, N new tokens (default 8)
//   metric NAME               the Quality panel's metric     pick POLICY BUDGET  as a click on that point
//   log-y on|off              the Quality panel's y axis on a log scale (where every value is above zero)
//   cache-type NAME | cache-page N   how live runs store the cache | count it in N-token pages too (0: not)
//   points PATH               the Quality panel's drawn points with their window pixels, one per line (real-pointer tests)
//   wait-file PATH [SECONDS]  until PATH exists (default 600 s; fails on timeout): another program's turn
//   status PATH               the status bar's note, the latest plot read-out (tooltip) and the runs on screen
//   quit
#include <string>
#include <vector>

namespace kvscope::viewers {

struct ScriptStep {
  std::string command;
  std::vector<std::string> args;
  int line = 0;
};

// Throws UsageError naming `origin`, the line and what was expected.
std::vector<ScriptStep> parse_script(const std::string& text, const std::string& origin = "script");
std::vector<ScriptStep> load_script(const std::string& path);

// "1200x800" -> width, height; throws UsageError.
void parse_size(const std::string& text, int& width, int& height);

inline constexpr const char* kPanelNames[] = {"setup",    "attention", "similarity", "layer_stats", "budget",
                                              "timeline", "tokens",    "summary",    "compare",     "quality",
                                              "samples",  "router"};

}  // namespace kvscope::viewers
