#include "core/policy/compose_policy.h"

#include <cmath>
#include <cstdlib>

#include "core/common/error.h"
#include "core/policy/policy_file.h"
#include "core/policy/scored_policy.h"

namespace kvscope::policy {

namespace {

constexpr const char* kCompose = "compose";
constexpr const char* kKeys = "first=POLICY, then=POLICY, then_ratio=R (in [0, 1)), first.NAME=VALUE, then.NAME=VALUE";

// "snapkv" + {window=64} -> "snapkv:window=64"; a file's parameters follow its path after a comma.
std::string with_params(const std::string& policy, const std::vector<std::string>& params) {
  std::string spec = policy;
  const bool file = parse_policy_file_spec(policy).has_value();
  const bool has_params = !file && policy.find(':') != std::string::npos;
  for (std::size_t i = 0; i < params.size(); ++i) spec += (i == 0 && !file && !has_params ? ":" : ",") + params[i];
  return spec;
}

ScoredPolicy* scored(PolicyInstance& instance, const std::string& role, const std::string& spec) {
  auto* p = dynamic_cast<ScoredPolicy*>(instance.policy.get());
  if (!p)
    throw UsageError("compose: " + role + "=" + spec + " is not a scored policy (one that ranks entries by a score: "
                     "snapkv, tova, h2o, streaming_llm, a python: file, ...), which compose needs");
  return p;
}

constexpr const char* kDefaultFirst = "snapkv";
constexpr const char* kDefaultThen = "streaming_llm";
constexpr double kDefaultThenRatio = 0.5;

}  // namespace

const std::vector<std::string>& composable_policy_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& info : all_policies()) {
      const PolicyInstance instance = make_policy(info.name);
      if (dynamic_cast<const ScoredPolicy*>(instance.policy.get())) out.push_back(info.name);
    }
    return out;
  }();
  return names;
}

std::string compose_prefix_rule() {
  return "first.NAME=VALUE and then.NAME=VALUE set the inner policies' parameters (first.window=64, "
         "then.sinks=4; a file's own too); the first's protocol (block, decode_evict, trim), allocation and budget "
         "are the run's; both select per head (selection=topk)";
}

const PolicyInfo& compose_policy_info() {
  static const PolicyInfo info = [] {
    PolicyInfo p;
    p.name = kCompose;
    p.summary = "two scored policies in sequence (kvpress ComposedPress): the first keeps the run's budget of each "
                "(layer, KV head), the second keeps int(k (1 - then_ratio)) of those k by its own scores";
    p.reference = "NVIDIA kvpress, ComposedPress (github.com/NVIDIA/kvpress); docs/policies.md, Compose two policies";
    const auto& names = composable_policy_names();
    p.params = {
        ParamSpec::choice("first", kDefaultFirst, names,
                          "the policy that keeps the run's budget: a scored built-in, or python:PATH / plugin:PATH "
                          "(its parameters as first.NAME=VALUE)"),
        ParamSpec::choice("then", kDefaultThen, names,
                          "the policy that keeps int(k (1 - then_ratio)) of the first's k entries: a scored built-in, "
                          "or python:PATH / plugin:PATH (its parameters as then.NAME=VALUE)"),
        ParamSpec::real("then_ratio", kDefaultThenRatio, 0.0, 1.0,
                        "the second policy's compression ratio of what the first kept (kvpress: its "
                        "compression_ratio); the run keeps int(int(n (1 - R)) (1 - then_ratio))"),
    };
    p.params.back().max_open = true;
    p.make = [](const PolicyParams& params) {
      std::string spec = std::string(kCompose) + ":first=" + params.get_choice("first") +
                         ",then=" + params.get_choice("then") + ",then_ratio=" +
                         std::to_string(params.get_float("then_ratio"));
      return std::move(make_composed_policy(spec).policy);
    };
    return p;
  }();
  return info;
}

bool is_compose_spec(const std::string& spec_text) {
  return spec_text == kCompose || spec_text.rfind(std::string(kCompose) + ":", 0) == 0;
}

PolicyInstance make_composed_policy(const std::string& spec_text) {
  // Split on ',' but keep a file path's own parameters apart: each item is key=value, the value may hold ':'.
  const PolicySpecText text = split_policy_spec(spec_text);
  std::string first, then;
  std::vector<std::string> first_params, then_params;
  double ratio = -1.0;
  for (const auto& [key, value] : text.assignments) {
    if (key == "first") first = value;
    else if (key == "then") then = value;
    else if (key.rfind("first.", 0) == 0) first_params.push_back(key.substr(6) + "=" + value);
    else if (key.rfind("then.", 0) == 0) then_params.push_back(key.substr(5) + "=" + value);
    else if (key == "then_ratio") {
      char* end = nullptr;
      ratio = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !std::isfinite(ratio) || ratio < 0.0 || ratio >= 1.0)
        throw UsageError("compose: then_ratio = '" + value + "' is not a number in [0, 1) (the second policy's "
                         "compression ratio of what the first kept)");
    } else {
      throw UsageError("compose: unknown key '" + key + "' in '" + spec_text + "'; valid: " + kKeys);
    }
  }
  // Left out, they take their defaults (compose_policy_info()), as any policy's parameters do.
  const bool first_given = !first.empty(), then_given = !then.empty();
  if (!first_given) first = kDefaultFirst;
  if (!then_given) then = kDefaultThen;
  if (ratio < 0.0) ratio = kDefaultThenRatio;
  if ((!first_given && !first_params.empty()) || (!then_given && !then_params.empty()))
    throw UsageError("compose: first.NAME= or then.NAME= given without first= or then= naming its policy (e.g. "
                     "compose:first=snapkv,then=python:examples/policies/key_norm.py,then_ratio=0.5,first.window=64); "
                     "valid keys: " + std::string(kKeys));
  if (is_compose_spec(first) || is_compose_spec(then))
    throw UsageError("compose: first and then must be single policies, not another compose");
  const std::string first_spec = with_params(first, first_params), then_spec = with_params(then, then_params);
  const auto make = [](const std::string& role, const std::string& spec) {
    try {
      return make_policy(spec);
    } catch (const UsageError& e) {
      throw UsageError("compose: " + role + " (" + spec + "): " + e.what());
    }
  };
  PolicyInstance a = make("first", first_spec), b = make("then", then_spec);
  ScoredPolicy* head = scored(a, "first", first_spec);
  scored(b, "then", then_spec);
  std::unique_ptr<ScoredPolicy> second(static_cast<ScoredPolicy*>(b.policy.release()));
  head->chain(std::move(second), ratio);

  // What the run records: the first's parameters as they are (its allocation, its protocol), then the second's
  // under `then.`, and the compose's own.
  PolicyInstance out;
  out.name = kCompose;
  out.params = a.params;
  out.params.set_choice("first", first);
  out.params.set_choice("then", then);
  out.params.set_number("then_ratio", ratio);
  for (const auto& [k, v] : b.params.as_text()) out.params.set_choice("then." + k, v);
  out.provenance = a.provenance;
  for (const auto& [k, v] : b.provenance) out.provenance["then." + k] = v;
  out.policy = std::move(a.policy);
  return out;
}

}  // namespace kvscope::policy
