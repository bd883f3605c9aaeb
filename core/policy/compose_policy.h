#pragma once
// kvpress's ComposedPress of two presses as a kvscope spec:
//   compose:first=snapkv,then=python:examples/policies/key_norm.py,then_ratio=0.5,first.window=64,first.kernel=5
// `first` and `then` name two scored policies (a built-in or a python:/plugin: file); `first.NAME=V` and
// `then.NAME=V` are their parameters (the spec's `,` separates the compose's own, so they cannot nest otherwise).
// The first keeps the run's budget, the second then_ratio of what the first kept (ScoredPolicy::chain).
#include <string>
#include <vector>

#include "core/policy/registry.h"

namespace kvscope::policy {

bool is_compose_spec(const std::string& spec_text);
// compose's own parameters (first, then, then_ratio; first and then offer the scored built-ins, and take a
// python:PATH or plugin:PATH file too), for `kvscope policies` and the window's form. `make` builds the spec from
// them (PolicyParams holding first, then, then_ratio); a spec's first.NAME / then.NAME go to make_composed_policy.
const PolicyInfo& compose_policy_info();
// How the inner policies' parameters are given: the prefix rule, one line.
std::string compose_prefix_rule();
// The built-in policies compose takes as first or then (the scored ones), in registry order.
const std::vector<std::string>& composable_policy_names();
// Throws UsageError naming what is missing or wrong (an unknown key, a policy that is not scored, a bad ratio).
// first, then and then_ratio left out take compose_policy_info()'s defaults.
PolicyInstance make_composed_policy(const std::string& spec_text);

}  // namespace kvscope::policy
