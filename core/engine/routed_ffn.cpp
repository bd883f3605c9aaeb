#include "core/engine/routed_ffn.h"

#include <algorithm>
#include <cstddef>

namespace kvscope::engine {

void routed_ffn(kernels::Backend& b, const kernels::ModelShape& shape, const kernels::LayerWeights& lw,
                kernels::RunState& s, int n, std::vector<ExpertChoice>& choices) {
  const std::size_t dim = static_cast<std::size_t>(shape.dim);
  const int k = shape.n_experts_used;
  std::vector<float> logits(static_cast<std::size_t>(n) * shape.n_experts);
  b.matmul(lw.router, s.xb, n, s.router_logits);
  b.to_host(s.router_logits, logits.data(), logits.size());
  choices.clear();
  choices.reserve(static_cast<std::size_t>(n) * k);
  for (int r = 0; r < n; ++r) {
    const auto row = route_token(logits.data() + static_cast<std::size_t>(r) * shape.n_experts, shape.n_experts, k,
                                 shape.expert_weights_norm);
    choices.insert(choices.end(), row.begin(), row.end());
  }

  // Each expert takes the rows routed to it as one batch (gathered on the host), as transformers' loop over
  // experts does; the outputs are summed per row in float32.
  std::vector<float> input(static_cast<std::size_t>(n) * dim), sum(input.size(), 0.0f), gathered, output;
  b.to_host(s.xb, input.data(), input.size());
  std::vector<int> rows;
  std::vector<float> weights;
  for (int e = 0; e < shape.n_experts; ++e) {
    rows.clear();
    weights.clear();
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < k; ++j)
        if (choices[static_cast<std::size_t>(r) * k + j].expert == e) {
          rows.push_back(r);
          weights.push_back(choices[static_cast<std::size_t>(r) * k + j].weight);
        }
    if (rows.empty()) continue;
    const int m = static_cast<int>(rows.size());
    gathered.resize(static_cast<std::size_t>(m) * dim);
    for (int i = 0; i < m; ++i)
      std::copy_n(input.data() + rows[i] * dim, dim, gathered.data() + static_cast<std::size_t>(i) * dim);
    b.from_host(gathered.data(), s.xb, gathered.size());
    const kernels::MatmulTarget gate_up[] = {{&lw.expert_gate[e], s.gate}, {&lw.expert_up[e], s.up}};
    b.matmul_shared_input(gate_up, s.xb, m);
    b.swiglu(s.gate, s.up, s.gate, static_cast<std::size_t>(m) * shape.ffn_dim);
    b.matmul(lw.expert_down[e], s.gate, m, s.proj);
    output.resize(gathered.size());
    b.to_host(s.proj, output.data(), output.size());
    for (int i = 0; i < m; ++i)
      for (std::size_t d = 0; d < dim; ++d) sum[rows[i] * dim + d] += weights[i] * output[i * dim + d];
  }
  b.from_host(sum.data(), s.proj, sum.size());
  b.add(s.x, s.proj, sum.size());
}

}  // namespace kvscope::engine
