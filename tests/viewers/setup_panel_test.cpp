// The set-up form without a window: which policy parameters it offers (against the parameter lists of
// the papers' allocations, written out here), and what its sample chooser says once the prompt changes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>

#include "core/policy/registry.h"
#include "viewers/session.h"
#include "viewers/setup_panel.h"

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
