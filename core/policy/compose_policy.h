#pragma once
// kvpress's ComposedPress of two presses as a kvscope spec:
//   compose:first=snapkv,then=python:examples/policies/key_norm.py,then_ratio=0.5,first.window=64,first.kernel=5
// `first` and `then` name two scored policies (a built-in or a python:/plugin: file); `first.NAME=V` and
// `then.NAME=V` are their parameters (the spec's `,` separates the compose's own, so they cannot nest otherwise).
// The first keeps the run's budget, the second then_ratio of what the first kept (ScoredPolicy::chain).
#include <string>

#include "core/policy/registry.h"

namespace kvscope::policy {

bool is_compose_spec(const std::string& spec_text);
// Throws UsageError naming what is missing or wrong (an unknown key, a policy that is not scored, a bad ratio).
PolicyInstance make_composed_policy(const std::string& spec_text);

}  // namespace kvscope::policy
