#include "core/policy/policy_file.h"

#include "core/common/error.h"
#include "core/policy/plugin_policy.h"
#include "core/policy/python_policy.h"

namespace kvscope::policy {

std::optional<PolicyFileSpec> parse_policy_file_spec(const std::string& text) {
  PolicyFileSpec spec;
  std::string rest;
  if (text.rfind("python:", 0) == 0) {
    spec.kind = PolicyFileSpec::Kind::Python;
    rest = text.substr(7);
  } else if (text.rfind("plugin:", 0) == 0) {
    spec.kind = PolicyFileSpec::Kind::Plugin;
    rest = text.substr(7);
  } else {
    return std::nullopt;
  }
  const auto comma = rest.find(',');
  spec.path = rest.substr(0, comma);
  if (spec.path.empty())
    throw UsageError("policy spec '" + text + "' names no file (python:PATH.py[,name=value...] or plugin:PATH.so[,...])");
  // The parameters parse as a built-in's do, after a placeholder name.
  if (comma != std::string::npos) spec.assignments = split_policy_spec("file:" + rest.substr(comma + 1)).assignments;
  return spec;
}

std::string policy_file_spec_for(const std::string& path) {
  if (path.rfind("python:", 0) == 0 || path.rfind("plugin:", 0) == 0) return path;
  const bool python = path.size() > 3 && path.compare(path.size() - 3, 3, ".py") == 0;
  return (python ? "python:" : "plugin:") + path;
}

std::string display_policy_spec(const std::string& text) {
  const auto spec = parse_policy_file_spec(text);
  if (!spec) return text;
  std::string out = (spec->kind == PolicyFileSpec::Kind::Python ? "python:" : "plugin:") + spec->path.stem().string();
  for (std::size_t i = 0; i < spec->assignments.size(); ++i)
    out += (i == 0 ? ":" : ",") + spec->assignments[i].first + "=" + spec->assignments[i].second;
  return out;
}

PolicyInfo load_policy_file(const PolicyFileSpec& spec) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(spec.path, ec))
    throw UsageError("policy file '" + spec.path.string() + "' does not exist or is not a file");
  return spec.kind == PolicyFileSpec::Kind::Python ? load_python_policy(spec.path) : load_plugin_policy(spec.path);
}

}  // namespace kvscope::policy
