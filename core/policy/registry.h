#pragma once
// Every policy by name, with its parameters; `make_policy("snapkv:window=32")` builds one.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/policy/params.h"
#include "core/policy/policy.h"

namespace kvscope::policy {

struct PolicyInfo {
  std::string name;
  std::string summary;     // one line
  std::string reference;   // the paper
  std::vector<ParamSpec> params;
  std::function<std::unique_ptr<Policy>(const PolicyParams&)> make;
  // Where a user's policy file came from (policy_file, policy_file_kind, policy_file_sha256); empty for the
  // built-ins. Recorded with every run of it.
  std::map<std::string, std::string> provenance = {};
  // A user's file: settles its parameters against the chosen allocation's before `make` (user_scorer.h,
  // resolve_allocation_params), so that the run's recorded parameters are those it runs with.
  std::function<void(PolicyParams&)> resolve_params = {};
};

const std::vector<PolicyInfo>& all_policies();
const PolicyInfo& find_policy(const std::string& name);  // throws UsageError listing the valid names

// A built-in's entry, or a user's file loaded anew (policy_file.h) for "python:PATH" and "plugin:PATH".
PolicyInfo describe_policy(const std::string& spec_text);

struct PolicyInstance {
  std::unique_ptr<Policy> policy;
  std::string name;
  PolicyParams params;
  std::map<std::string, std::string> provenance;  // PolicyInfo::provenance
};
PolicyInstance make_policy(const std::string& spec_text);

}  // namespace kvscope::policy
