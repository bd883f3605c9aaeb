#include "core/policy/registry.h"

#include <optional>

#include "core/common/error.h"
#include "core/policy/catalog.h"
#include "core/policy/compose_policy.h"
#include "core/policy/policy_file.h"
#include "core/policy/scored_policy.h"

namespace kvscope::policy {

const std::vector<PolicyInfo>& all_policies() {
  static const std::vector<PolicyInfo> policies = {
      full_policy_info(),      streaming_llm_policy_info(), local_window_policy_info(), h2o_policy_info(),
      tova_policy_info(),      snapkv_policy_info(),        pyramidkv_policy_info(),    d2o_policy_info(),
      dynamickv_policy_info(), caote_policy_info(),         kvmerger_policy_info(),     cake_policy_info(),
      cam_policy_info(),      expected_attention_policy_info(), non_causal_attn_policy_info(), compactor_policy_info(),
  };
  return policies;
}

const PolicyInfo& find_policy(const std::string& name) {
  for (const auto& info : all_policies())
    if (info.name == name) return info;
  // 'd2o,swa=skip' or 'snapkv budget=64': a known policy followed by its parameters with the wrong separator.
  const auto head_end = name.find_first_of(", ");
  if (head_end != std::string::npos && head_end > 0) {
    const std::string head = name.substr(0, head_end);
    for (const auto& info : all_policies())
      if (info.name == head)
        throw UsageError("unknown policy '" + name + "': parameters follow the policy's name after a colon, as in '" +
                         head + ":" + name.substr(head_end + 1) + "'");
  }
  std::string names;
  for (const auto& info : all_policies()) names += (names.empty() ? "" : ", ") + info.name;
  throw UsageError("unknown policy '" + name + "'; valid policies: " + names +
                   " (or python:FILE.py and plugin:FILE.so for a policy of your own)");
}

PolicyInfo describe_policy(const std::string& spec_text) {
  if (const auto file = parse_policy_file_spec(spec_text)) return load_policy_file(*file);
  return find_policy(split_policy_spec(spec_text).name);
}

PolicyInstance make_policy(const std::string& spec_text) {
  if (is_compose_spec(spec_text)) return make_composed_policy(spec_text);
  const auto file = parse_policy_file_spec(spec_text);
  const PolicyInfo info = describe_policy(spec_text);
  PolicyInstance instance;
  instance.name = info.name;
  // swa= is every policy's (swa_mode.h), settled here rather than declared by each; recorded only when given,
  // so runs on models without sliding-window layers keep their parameters as they were.
  auto assignments = file ? file->assignments : split_policy_spec(spec_text).assignments;
  std::optional<SwaMode> swa;
  std::erase_if(assignments, [&](const auto& a) {
    if (a.first != "swa") return false;
    swa = parse_swa_mode(a.second);
    return true;
  });
  instance.params = PolicyParams(info.name, info.params, assignments);
  drop_unchosen_allocation_params(info.name, info.params, instance.params);
  if (info.resolve_params) info.resolve_params(instance.params);
  instance.provenance = info.provenance;
  instance.policy = info.make(instance.params);
  if (swa) {
    instance.policy->set_swa_mode(*swa);
    instance.params.set_choice("swa", swa_mode_name(*swa));
  }
  return instance;
}

}  // namespace kvscope::policy
