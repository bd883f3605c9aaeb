#pragma once
// What a block-wise prefill computes before its policy first edits the cache. Until that edit the cache
// holds every row, so each layer of each block sees exactly what it would in any other run of the same
// prompt and block size, whatever the policy or its budget. A capture keeps the residual stream entering
// every layer of those blocks; a later run (another budget, another block-wise policy) takes a layer's
// input from it instead of computing the layer below, for as long as its own cache stays unedited. It still
// computes each layer's attention, so its policy and observers see what a fresh run shows them, and the
// first layer whose policy edits is finished from the captured input: the run is the fresh run, bit for bit,
// at the cost of the projections and MLPs it skipped. This is the slider's "re-run from the first block
// where the policy acts" (RunHooks::block_prefix).
#include <cstddef>
#include <vector>

#include "core/engine/expert_routing.h"
#include "kernels/backend.h"

namespace kvscope::engine {

struct BlockPrefixCapture {
  // Past this size a capture stops growing: a long prompt on a wide model would otherwise keep gigabytes.
  static constexpr std::size_t kMaxBytes = std::size_t{256} << 20;

  std::vector<int> prompt;
  int block = 0;
  kernels::KVCacheTypes cache_type = kernels::CacheType::F32;
  // inputs[b][l]: [rows of block b][dim], the residual stream entering layer l of block b; inputs[b][n_layers]
  // leaves the last layer. Only blocks whose every layer ran while the capturing run's cache was unedited.
  std::vector<std::vector<std::vector<float>>> inputs;
  // routing[b][l]: layer l's expert choices for block b's rows (mixture-of-experts models), which a layer taken
  // from the capture still reports to the observers.
  std::vector<std::vector<std::vector<ExpertChoice>>> routing;

  int blocks() const { return static_cast<int>(inputs.size()); }
  std::size_t bytes() const;
  // Whether this capture belongs to a run of `prompt` in blocks of `block` rows; if not, empties it and
  // takes that run's identity, so the run fills it afresh.
  void adopt(const std::vector<int>& prompt, int block, kernels::KVCacheTypes cache_type);
};

}  // namespace kvscope::engine
