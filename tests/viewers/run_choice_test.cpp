// A point clicked in the Quality panel (viewers/run_choice.h): a run of that (policy, budget, cache type) on the
// prompt is found among the runs on screen as the runs recorded themselves (their metadata), so the window shows
// it instead of running it again; any other run, prompt, budget or cache type is not it.
#include <catch2/catch.hpp>

#include "core/common/error.h"
#include "viewers/run_choice.h"

using namespace kvscope;
using namespace kvscope::viewers;

namespace {

RunEntry run_of(const std::string& policy, const std::string& budget, const std::string& cache_type,
                const std::string& prompt) {
  auto run = std::make_shared<trace::RunTrace>();
  run->name = policy + "_" + budget + "_" + cache_type;
  run->metadata = {{"policy", policy}, {"policy_spec", policy}, {"budget", budget}, {"prompt", prompt}};
  if (!cache_type.empty()) run->metadata["cache_type"] = cache_type;
  RunEntry e;
  e.run = run;
  e.slot = "live";
  return e;
}

}  // namespace

TEST_CASE("a clicked point's run on screen is found by policy, budget, cache type and prompt", "[viewers]") {
  AppState state;
  state.runs = {run_of("snapkv", "25%", "f32", "a"), run_of("snapkv", "25%", "q8_0", "a"),
                run_of("h2o", "25%", "q8_0", "a"), run_of("snapkv", "50%", "q8_0", "a"),
                run_of("snapkv", "25%", "q4_0", "b"), run_of("snapkv", "25%", "", "b")};
  CHECK(run_of_choice(state, {"snapkv", "25%", "q8_0", "Pareto point"}, "a") == 1);
  CHECK(run_of_choice(state, {"h2o", "25%", "q8_0", ""}, "a") == 2);
  // No cache type is float32, in the choice and in a trace written before cache types were recorded.
  CHECK(run_of_choice(state, {"snapkv", "25%", "", ""}, "a") == 0);
  CHECK(run_of_choice(state, {"snapkv", "25%", "f32", ""}, "b") == 5);
  // Another prompt, budget or cache type is another run.
  CHECK(run_of_choice(state, {"snapkv", "25%", "q4_0", ""}, "a") == -1);
  CHECK(run_of_choice(state, {"snapkv", "10%", "q8_0", ""}, "a") == -1);
  CHECK(run_of_choice(state, {"tova", "25%", "q8_0", ""}, "a") == -1);
  // KIVI's defaults are named as runs name them.
  CHECK(choice_cache_type({"snapkv", "25%", "kivi2", ""}) == "kivi2");
  CHECK_THROWS_AS(choice_cache_type({"snapkv", "25%", "q9_9", ""}), UsageError);
  CHECK(describe_choice({"snapkv", "25%", "q8_0", ""}) == "snapkv at 25% with a q8_0 cache");
  CHECK(describe_choice({"snapkv", "25%", "", ""}) == "snapkv at 25%");
}
