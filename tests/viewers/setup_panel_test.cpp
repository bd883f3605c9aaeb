// The set-up form without a window: which policy parameters it offers (against the parameter lists of
// the papers' allocations, written out here), what its sample chooser says once the prompt changes, and
// which shipped policy files its policy chooser offers; and the runs of a policy file that no longer loads marked
// stale.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "core/policy/compose_policy.h"
#include "core/policy/registry.h"
#include "viewers/session.h"
#include "viewers/setup_panel.h"
#include "viewers/stale_runs.h"

using namespace kvscope;
using namespace kvscope::viewers;

namespace {

bool shows(const SetupPanel& panel, const std::string& name) {
  const auto names = panel.shown_params();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Each allocation's own parameters (PyramidKV's beta, D2O's layer variance, DynamicKV's buffer, CAKE's
// window and temperatures); see docs/policies.md, Allocations.
const std::vector<std::pair<std::string, std::vector<std::string>>> kAllocationOnly = {
    {"pyramid", {"beta"}},
    {"d2o", {"variance_norm", "variance_temperature", "variance_heads", "min_layer_tokens"}},
    {"dynamickv", {"r_max", "arithmetic"}},
    {"cake", {"cake_window", "cake_tau1", "cake_tau2"}},
    {"per_layer", {"layer_ratios"}},
};

}  // namespace

TEST_CASE("the set-up form shows an allocation's parameters only under that allocation", "[setup]") {
  Session session(1);
  SetupPanel panel(session);
  int with_choice = 0;
  for (const auto& info : policy::all_policies()) {
    const bool has_choice = std::any_of(info.params.begin(), info.params.end(),
                                        [](const policy::ParamSpec& p) { return p.name == "allocation"; });
    if (!has_choice) continue;
    ++with_choice;
    for (const auto& [allocation, own] : kAllocationOnly) {
      INFO(info.name << " with allocation=" << allocation);
      panel.set_policy(info.name + ":allocation=" + allocation);
      CHECK(shows(panel, "allocation"));
      for (const auto& [other, params] : kAllocationOnly)
        for (const auto& p : params) CHECK(shows(panel, p) == (other == allocation));
    }
    INFO(info.name << " with allocation=uniform");
    panel.set_policy(info.name + ":allocation=uniform");
    for (const auto& [other, params] : kAllocationOnly)
      for (const auto& p : params) CHECK_FALSE(shows(panel, p));
  }
  CHECK(with_choice >= 4);  // snapkv, pyramidkv, h2o, tova, streaming_llm at the time of writing
  // SnapKV's own window, kernel and pooling share their names with DynamicKV's: they are SnapKV's, so
  // they stay under every allocation.
  panel.set_policy("snapkv:allocation=uniform");
  for (const char* p : {"window", "kernel", "pooling", "group_reduce"}) CHECK(shows(panel, p));
  // A list parameter is held as its text and given back in the spec the form runs.
  panel.set_policy("snapkv:allocation=per_layer,layer_ratios=0.5/0.25");
  CHECK(panel.policy_spec() == "snapkv:allocation=per_layer,layer_ratios=0.5/0.25");
  // Policies with a fixed allocation take every parameter they declare.
  for (const std::string policy : {"cake", "dynamickv", "d2o"}) {
    INFO(policy);
    panel.set_policy(policy);
    std::set<std::string> declared;
    for (const auto& p : policy::find_policy(policy).params) declared.insert(p.name);
    const auto shown = panel.shown_params();
    CHECK(std::set<std::string>(shown.begin(), shown.end()) == declared);
  }
  // An inert parameter stays out of the run: beta means nothing with allocation=uniform.
  panel.set_policy("snapkv:allocation=uniform,beta=30");
  CHECK(panel.policy_spec().find("beta") == std::string::npos);
  panel.set_policy("snapkv:allocation=pyramid,beta=30");
  CHECK(panel.policy_spec().find("beta=30") != std::string::npos);
}

TEST_CASE("the sample chooser names the sample only while the prompt is that sample", "[setup]") {
  Session session(1);
  SetupPanel panel(session);
  const auto names = sample_prompt_names();
  REQUIRE(names.size() >= 2);
  CHECK(panel.sample_shown() == names.front());  // the first screen
  panel.set_sample(names[1]);
  CHECK(panel.sample_shown() == names[1]);
  // A script's `prompt` command (or a loaded file) replaces the text: the chooser no longer claims it.
  panel.set_prompt("The cat sat on the mat.");
  CHECK(panel.sample_shown() == "(custom)");
  // The text of a sample is that sample again, however it got there.
  panel.set_prompt(sample_prompt(names.front()));
  CHECK(panel.sample_shown() == names.front());
  panel.set_prompt(sample_prompt(names[1]));
  CHECK(panel.sample_shown() == names[1]);
  panel.set_prompt(sample_prompt(names[1]) + " ");
  CHECK(panel.sample_shown() == "(custom)");
}

namespace {

// The policies under examples/policies, found here without kvscope's listing: the .py files that define score().
std::set<std::string> policy_files_defining_score() {
  std::set<std::string> stems;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(KVSCOPE_SOURCE_DIR) / "examples" / "policies")) {
    if (entry.path().extension() != ".py") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find("\ndef score(") != std::string::npos) stems.insert(entry.path().stem().string());
  }
  return stems;
}

}  // namespace

TEST_CASE("the policy chooser offers the shipped policy files and loads one when chosen", "[setup]") {
  Session session(1);
  SetupPanel panel(session);
  const auto expected = policy_files_defining_score();
  REQUIRE(expected.count("lagkv") == 1);  // the kvpress ports are there to be offered
  std::set<std::string> offered;
  std::string lagkv_path;
  for (const auto& c : panel.policy_choices()) {
    if (c.section != "shipped files") continue;
    INFO(c.label << " " << c.path);
    CHECK(c.label.rfind("python:", 0) == 0);
    CHECK(c.index == -1);  // not loaded before it is chosen
    offered.insert(c.label.substr(7));
    if (c.label == "python:lagkv") lagkv_path = c.path;
  }
  CHECK(offered == expected);
  CHECK(offered.count("_torch_cpu_rng") == 0);  // a helper module, not a policy
  // Built-ins come first, as before.
  CHECK(panel.policy_choices().front().section.empty());

  // Chosen (as the chooser does, through the file loader), it is the policy with its own parameters, listed
  // once: under the shipped files, not again under the user's.
  REQUIRE_FALSE(lagkv_path.empty());
  panel.set_policy("python:" + lagkv_path);
  CHECK(panel.policy_name() == "python:lagkv");
  int listed = 0;
  for (const auto& c : panel.policy_choices())
    if (c.path == lagkv_path) {
      ++listed;
      CHECK(c.section == "shipped files");
      CHECK(c.index >= static_cast<int>(policy::all_policies().size()));
    }
  CHECK(listed == 1);
  const auto params = panel.shown_params();
  CHECK(std::find(params.begin(), params.end(), "lag_size") != params.end());
}

TEST_CASE("the policy chooser offers compose with its own parameters", "[setup]") {
  Session session(1);
  SetupPanel panel(session);
  const auto choices = panel.policy_choices();
  const auto it = std::find_if(choices.begin(), choices.end(), [](const auto& c) { return c.label == "compose"; });
  REQUIRE(it != choices.end());
  // After the built-ins, before the shipped files.
  CHECK(it->section == "two in sequence");
  CHECK(std::prev(it)->section.empty());
  CHECK(it->path.empty());

  panel.set_policy("compose:first=h2o,then=tova,then_ratio=0.25");
  CHECK(panel.policy_name() == "compose");
  CHECK(panel.shown_params() == std::vector<std::string>{"first", "then", "then_ratio"});
  CHECK(panel.policy_spec() == "compose:first=h2o,then=tova,then_ratio=0.25");
  // What the form runs is a spec the registry builds: h2o first, tova on what it kept.
  const auto made = policy::make_policy(panel.request().policy_spec);
  CHECK(made.name == "compose");
  CHECK(made.params.get_choice("then") == "tova");
  // Its defaults alone are a policy too.
  panel.set_policy("compose");
  CHECK(panel.policy_spec() == "compose");
  CHECK_NOTHROW(policy::make_policy(panel.policy_spec()));
  CHECK_THROWS_WITH(panel.set_policy("compose:first=snapkv,first.window=64"),
                    Catch::Contains("'first.window'") && Catch::Contains("command line"));
}

TEST_CASE("a policy file saved with a syntax error marks the runs of its previous version stale", "[setup]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kvscope_stale_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "mine.py";
  // Each save gets a later time stamp than the one before, as an editor's would.
  auto save = [&, stamp = fs::file_time_type::clock::now()](const std::string& text) mutable {
    std::ofstream(file) << text;
    stamp += std::chrono::seconds(2);
    fs::last_write_time(file, stamp);
  };
  save("def score(obs):\n    return -(obs.keys ** 2).sum(axis=-1)\n");

  Session session(1);
  SetupPanel panel(session);
  AppState state;
  panel.set_policy("python:" + file.string());
  // The live run of this version and the full-cache baseline, as the window holds them.
  for (const std::string& spec : {panel.request().policy_spec, std::string("full")}) {
    auto run = std::make_shared<trace::RunTrace>();
    run->name = spec == "full" ? "full" : "python_mine_b25pct";
    run->prompt_ids = {1, 2, 3};
    RunEntry e;
    e.run = run;
    e.slot = spec == "full" ? "baseline" : "live";
    e.source = "live";
    auto request = std::make_shared<RunRequest>();
    request->policy_spec = spec;
    e.request = request;
    state.runs.push_back(e);
  }
  state.active = 1;  // the baseline shown
  CHECK(policy_file_of(state, 0) == file.string());
  CHECK(policy_file_of(state, 1).empty());
  CHECK(stale_notice(state, true).empty());

  save("def score(obs)\n    return obs.keys\n");
  CHECK_FALSE(panel.reload_changed_policy_file(state));  // nothing to re-run
  REQUIRE(state.policy_file_errors.count(file.string()) == 1);
  const std::string why = stale_reason(state, 0);
  INFO(why);
  CHECK(why.find("previous version of mine.py") != std::string::npos);
  CHECK(why.find("line 1") != std::string::npos);
  CHECK(why.find("SyntaxError") != std::string::npos);
  CHECK(stale_reason(state, 1).empty());  // the full cache ran no file
  // A single-run panel showing the baseline has nothing stale; Summary, Compare, ... show the live run too.
  CHECK(stale_notice(state, false).empty());
  CHECK(stale_notice(state, true) == "STALE: python_mine_b25pct " + why);
  state.active = 0;
  CHECK(stale_notice(state, false) == "STALE: python_mine_b25pct " + why);
  // The footer, always on screen, says the file was not run and why.
  const std::string footer = panel.policy_file_problem();
  INFO(footer);
  CHECK(footer.rfind("not run: ", 0) == 0);
  CHECK(footer.find(file.string()) != std::string::npos);
  CHECK(footer.find("line 1") != std::string::npos);
  CHECK(footer.find("previous version") != std::string::npos);

  // The next good save loads and re-runs: nothing is stale any more.
  save("def score(obs):\n    return (obs.keys ** 2).sum(axis=-1)\n");
  CHECK(panel.reload_changed_policy_file(state));
  CHECK(state.policy_file_errors.empty());
  CHECK(stale_notice(state, true).empty());
  CHECK(panel.policy_file_problem().empty());
  fs::remove_all(dir);
}
