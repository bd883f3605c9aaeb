#pragma once
// SnapKV's scorer, shared with PyramidKV (the same indicator under another allocation).
#include <memory>
#include <string>
#include <vector>

#include "core/policy/params.h"
#include "core/policy/policy.h"

namespace kvscope::policy {

// window, kernel, pooling, group_reduce, then `allocation` (default as given) and allocation parameters.
std::vector<ParamSpec> snapkv_params(const std::string& default_allocation);
// A SnapKV policy reporting itself as `name`; throws UsageError for an even kernel.
std::unique_ptr<Policy> make_snapkv(const std::string& name, const PolicyParams& params);

}  // namespace kvscope::policy
