// Unique names for the runs on screen (viewers/run_names.h): expected names written out by hand for a live run, a
// kept copy of it, a baseline, two files with one name, and runs of a second prompt.
#include <catch2/catch.hpp>

#include "viewers/panel.h"
#include "viewers/run_names.h"

using namespace kvscope;
using namespace kvscope::viewers;

namespace {

RunEntry entry(const std::string& name, const std::string& slot, std::vector<int32_t> prompt,
               const std::string& source = "live") {
  auto run = std::make_shared<trace::RunTrace>();
  run->name = name;
  run->prompt_ids = std::move(prompt);
  RunEntry e;
  e.run = run;
  e.slot = slot;
  e.source = source;
  return e;
}

}  // namespace

TEST_CASE("runs on screen get unique names, with a prompt tag only when prompts differ", "[viewers]") {
  const std::vector<int32_t> a = {1, 2, 3}, b = {1, 2, 4};
  std::vector<RunEntry> runs = {entry("snapkv_b25pct", "live", a), entry("full", "baseline", a),
                                entry("snapkv_b25pct", "pin1", a)};
  CHECK(shown_run_names(runs) ==
        std::vector<std::string>{"snapkv_b25pct (live)", "full", "snapkv_b25pct (kept 1)"});
  CHECK(prompt_tag(runs, 0).empty());

  // Two files holding runs of one name, and an entry without a run yet.
  runs.push_back(entry("h2o_b64", "x.h5#h2o_b64", a, "/tmp/x.h5"));
  runs.push_back(entry("h2o_b64", "x.h5#h2o_b64 2", a, "/tmp/x.h5"));
  runs.push_back(RunEntry{});
  CHECK(shown_run_names(runs) == std::vector<std::string>{"snapkv_b25pct (live)", "full", "snapkv_b25pct (kept 1)",
                                                          "h2o_b64 (x.h5)", "h2o_b64 (x.h5) #2", ""});

  // A run of another prompt: every run is tagged with its prompt's number, in order of first appearance.
  std::vector<RunEntry> mixed = {entry("snapkv_b25pct", "pin1", a), entry("snapkv_b25pct", "live", b),
                                 entry("full", "baseline", b)};
  CHECK(shown_run_names(mixed) ==
        std::vector<std::string>{"snapkv_b25pct (kept 1) [p1]", "snapkv_b25pct (live) [p2]", "full [p2]"});
  CHECK(prompt_tag(mixed, 0) == "p1");
  CHECK(prompt_tag(mixed, 2) == "p2");

  AppState state;
  state.runs = mixed;
  CHECK(state.run_name(1) == "snapkv_b25pct (live) [p2]");
  // Menus keep their slot tag where the name does not already say where the run comes from.
  CHECK(run_label(state, 2) == "full [p2]  [baseline]");
  CHECK(run_label(state, 1) == "snapkv_b25pct (live) [p2]");
}
