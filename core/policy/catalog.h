#pragma once
// One function per policy file, returning its registry entry. registry.cpp lists them all; a policy file
// that is not listed there is not reachable by name.
#include "core/policy/registry.h"

namespace kvscope::policy {

PolicyInfo full_policy_info();

}  // namespace kvscope::policy
