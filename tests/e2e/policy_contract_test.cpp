// The user policy contract (issue 36): what a Python policy file sees in `obs` and how its parameters live
// beside kvscope's, checked against independent facts (the spec given, the model's own numbers).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/policy/budget_spec.h"
#include "core/policy/registry.h"
#include "tests/support/default_model.h"
#include "tests/support/temp_file.h"

using namespace kvscope;

namespace {

std::string write_policy(const std::string& name, const std::string& source) {
  const auto path = test::temp_file(name, ".py");
  std::ofstream(path) << source;
  return path.string();
}

std::string plugin(const std::string& name) {
  return (std::filesystem::path(KVSCOPE_PLUGIN_DIR) / (name + ".so")).string();
}

// Runs `spec` on a short prompt (at most `new_tokens` decode steps); the error text, or "" when it ran.
std::string run_error(const std::string& spec, const std::string& budget = "50%", int new_tokens = 1) {
  const model::Model* model = test::default_model();
  const auto prompt = test::sample_prompt_tokens(*model, "heat_pump.txt");
  try {
    auto policy = policy::make_policy(spec);
    engine::Engine engine(*model);
    engine::GenerateOptions options;
    options.max_new_tokens = new_tokens;
    options.stop_at_end_of_generation = false;
    options.budget = policy::BudgetSpec::parse(budget);
    engine::RunHooks hooks;
    hooks.policy = policy.policy.get();
    engine.generate(prompt, options, hooks);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string make_error(const std::string& spec) {
  try {
    policy::make_policy(spec);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no error)";
}

std::set<std::string> recorded_names(const std::string& spec) {
  std::set<std::string> names;
  for (const auto& [k, v] : policy::make_policy(spec).params.as_text()) names.insert(k);
  return names;
}

std::set<std::string> with(std::set<std::string> a, const std::set<std::string>& b) {
  a.insert(b.begin(), b.end());
  return a;
}

const std::set<std::string> kFramework = {"window", "recent", "sinks", "block", "decode_evict", "trim", "allocation"};

}  // namespace

TEST_CASE("obs.params holds the file's and the framework's parameters, and only the chosen allocation's",
          "[e2e][policy_contract]") {
  // score() fails the run unless obs.params has exactly the names the test expects, given in `expected`.
  const auto path = write_policy("params_view", R"PY(
import numpy as np
params = {"alpha": 0.5, "expected": {"default": "", "choices": ["", "uniform", "pyramid", "dynamickv"]}}
FRAMEWORK = {"window", "recent", "sinks", "block", "decode_evict", "trim", "allocation"}
BY_ALLOCATION = {"": set(), "uniform": set(), "pyramid": {"beta"},
                 "dynamickv": {"kernel", "pooling", "group_reduce", "r_max", "arithmetic"}}
def score(obs):
    want = {"alpha", "expected"} | FRAMEWORK | BY_ALLOCATION[obs.params["expected"]]
    got = set(obs.params)
    if got != want:
        raise AssertionError("obs.params: extra %s, missing %s" % (sorted(got - want), sorted(want - got)))
    return -obs.positions.astype(np.float64)
)PY");
  CHECK(run_error("python:" + path + ",expected=uniform") == "");
  CHECK(run_error("python:" + path + ",expected=pyramid,allocation=pyramid,beta=10") == "");
  CHECK(run_error("python:" + path + ",expected=dynamickv,allocation=dynamickv") == "");
  // The check inside the file can fail: without the allocation its parameters are not there.
  CHECK_THAT(run_error("python:" + path + ",expected=pyramid"), Catch::Contains("missing ['beta']"));

  // What a trace records (policy_params) is the same set.
  const std::set<std::string> file_params = {"alpha", "expected"};
  CHECK(recorded_names("python:" + path) == with(kFramework, file_params));
  CHECK(recorded_names("python:" + path + ",allocation=pyramid") == with(with(kFramework, file_params), {"beta"}));
  // Built-ins likewise: SnapKV's own parameters, no allocation's until it is chosen.
  const auto snapkv = recorded_names("snapkv");
  CHECK(snapkv.count("beta") == 0);
  CHECK(snapkv.count("cake_tau1") == 0);
  CHECK(snapkv.count("variance_norm") == 0);
  CHECK(snapkv.count("window") == 1);
  CHECK(recorded_names("snapkv:allocation=cake").count("cake_tau1") == 1);
  CHECK(recorded_names("snapkv:allocation=cake").count("beta") == 0);
}

TEST_CASE("an allocation's parameter given without its allocation is refused", "[e2e][policy_contract]") {
  CHECK_THAT(make_error("snapkv:beta=10"),
             Catch::Contains("'beta'") && Catch::Contains("allocation pyramid") && Catch::Contains("allocation=uniform"));
  const auto path = write_policy("plain", "def score(obs):\n    return -obs.positions\n");
  CHECK_THAT(make_error("python:" + path + ",cake_tau1=2"), Catch::Contains("allocation cake"));
  CHECK(make_error("python:" + path + ",allocation=cake,cake_tau1=2") == "(no error)");
}

TEST_CASE("a file parameter named like the chosen allocation's is refused naming the file and both owners",
          "[e2e][policy_contract]") {
  // `pooling` is also dynamickv's (avg, max, none): before, the file's default `max` became dynamickv's pooling.
  const auto path = write_policy("pooling_owner", R"PY(
params = {"pooling": {"default": "max", "choices": ["avg", "max"]}}
def score(obs):
    return -obs.positions
)PY");
  CHECK(make_error("python:" + path) == "(no error)");
  CHECK(make_error("python:" + path + ",allocation=pyramid") == "(no error)");
  for (const std::string spec : {",allocation=dynamickv", ",allocation=dynamickv,pooling=avg"}) {
    INFO(spec);
    CHECK_THAT(make_error("python:" + path + spec), Catch::Contains("policy file '" + path + "'") &&
                                                        Catch::Contains("'pooling'") &&
                                                        Catch::Contains("allocation 'dynamickv'"));
  }
}

TEST_CASE("a framework parameter an allocation shares never takes the file's default unseen", "[e2e][policy_contract]") {
  // dynamickv's window (default 8) is the scorer's observation window too.
  const auto silent = write_policy("no_window", "def score(obs):\n    return -obs.positions\n");
  CHECK(policy::make_policy("python:" + silent + ",allocation=dynamickv").params.get_int("window") == 8);
  CHECK(policy::make_policy("python:" + silent).params.get_int("window") == 0);
  CHECK(policy::make_policy("plugin:" + plugin("key_norm_plugin") + ",allocation=dynamickv").params.get_int("window") == 8);

  const auto declares = write_policy("window_32", "params = {'window': 32}\ndef score(obs):\n    return -obs.positions\n");
  CHECK_THAT(make_error("python:" + declares + ",allocation=dynamickv"),
             Catch::Contains(declares) && Catch::Contains("'window'") && Catch::Contains("dynamickv") &&
                 Catch::Contains("the file's 32") && Catch::Contains("the allocation's 8"));
  CHECK(policy::make_policy("python:" + declares + ",allocation=dynamickv,window=16").params.get_int("window") == 16);
  CHECK(policy::make_policy("python:" + declares + ",allocation=pyramid").params.get_int("window") == 32);
}
