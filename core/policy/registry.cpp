#include "core/policy/registry.h"

#include "core/common/error.h"
#include "core/policy/catalog.h"

namespace kvscope::policy {

const std::vector<PolicyInfo>& all_policies() {
  static const std::vector<PolicyInfo> policies = {
      full_policy_info(),      streaming_llm_policy_info(), local_window_policy_info(), h2o_policy_info(),
      tova_policy_info(),      snapkv_policy_info(),        pyramidkv_policy_info(),    d2o_policy_info(),
      dynamickv_policy_info(), caote_policy_info(),         kvmerger_policy_info(),     cake_policy_info(),
      cam_policy_info(),
  };
  return policies;
}

const PolicyInfo& find_policy(const std::string& name) {
  for (const auto& info : all_policies())
    if (info.name == name) return info;
  std::string names;
  for (const auto& info : all_policies()) names += (names.empty() ? "" : ", ") + info.name;
  throw UsageError("unknown policy '" + name + "'; valid policies: " + names);
}

PolicyInstance make_policy(const std::string& spec_text) {
  const PolicySpecText spec = split_policy_spec(spec_text);
  const PolicyInfo& info = find_policy(spec.name);
  PolicyInstance instance;
  instance.name = info.name;
  instance.params = PolicyParams(info.name, info.params, spec.assignments);
  instance.policy = info.make(instance.params);
  return instance;
}

}  // namespace kvscope::policy
