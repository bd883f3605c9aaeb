// PyramidKV (Cai et al., 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information
// Funneling", §3): SnapKV's indicator selects the tokens, and the budget per layer falls linearly from the
// bottom layer to the top (the `pyramid` allocation, allocation_pyramid.cpp), because attention funnels
// onto fewer tokens with depth. See docs/policies.md, "pyramidkv".
#include "core/policy/catalog.h"
#include "core/policy/snapkv.h"

namespace kvscope::policy {

PolicyInfo pyramidkv_policy_info() {
  return {"pyramidkv", "SnapKV's indicator with budgets falling linearly from the bottom layer to the top",
          "Cai et al. 2024, PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling, §3",
          snapkv_params("pyramid"), [](const PolicyParams& p) { return make_snapkv("pyramidkv", p); }};
}

}  // namespace kvscope::policy
