#pragma once
// Every policy by name, with its parameters; `make_policy("snapkv:window=32")` builds one.
#include <functional>
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
};

const std::vector<PolicyInfo>& all_policies();
const PolicyInfo& find_policy(const std::string& name);  // throws UsageError listing the valid names

struct PolicyInstance {
  std::unique_ptr<Policy> policy;
  std::string name;
  PolicyParams params;
};
PolicyInstance make_policy(const std::string& spec_text);

}  // namespace kvscope::policy
