#include "core/engine/block_prefix.h"

namespace kvscope::engine {

std::size_t BlockPrefixCapture::bytes() const {
  std::size_t n = 0;
  for (const auto& block_inputs : inputs)
    for (const auto& layer_input : block_inputs) n += layer_input.size() * sizeof(float);
  for (const auto& block_routing : routing)
    for (const auto& layer_routing : block_routing) n += layer_routing.size() * sizeof(ExpertChoice);
  return n;
}

void BlockPrefixCapture::adopt(const std::vector<int>& run_prompt, int run_block, kernels::KVCacheTypes run_cache_type) {
  if (prompt == run_prompt && block == run_block && cache_type == run_cache_type) return;
  prompt = run_prompt;
  block = run_block;
  cache_type = run_cache_type;
  inputs.clear();
  routing.clear();
}

}  // namespace kvscope::engine
