#pragma once
// What exact attention is rebuilt from (docs/trace-format.md, `qk/`): for a span of consecutive positions,
// per layer, the post-RoPE queries and keys as float16 bits and each attention row's log-sum-exp. Any cell
// of any layer and head is then exp(q.k * scale - lse) (core/trace/exact_attention.h), so a trace holds
// attention at every zoom in storage linear in the prompt instead of quadratic.
#include <cstdint>
#include <memory>
#include <vector>

namespace kvscope::trace {

struct QKSpan {
  int first_position = 0, n_positions = 0;
  struct Layer {
    std::vector<uint16_t> queries;  // [n_positions][n_heads][head_dim], float16 bits
    std::vector<uint16_t> keys;     // [n_positions][n_kv_heads][head_dim], float16 bits, as first appended
    // [n_positions][n_heads], natural log of sum_j exp(q.k_j * scale) over the keys the row attended to.
    // NaN: the row's attention did not see the cache the kept mask implies (a policy edited the layer
    // before the row attended: trim=before_output), so its cells cannot be rebuilt.
    std::vector<float> lse;
  };
  std::vector<Layer> layers;  // [n_layers]
};

using QKSpanRef = std::shared_ptr<const QKSpan>;

}  // namespace kvscope::trace
