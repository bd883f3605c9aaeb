#include "core/engine/routed_ffn.h"

#include <algorithm>
#include <cstddef>

#include "kernels/common/softmax_math.h"

namespace kvscope::engine {
namespace {

// gpt-oss: the gate and up biases, then the clamped SwiGLU, into s.gate (m rows of ffn_dim), on the host.
void gpt_oss_activation(kernels::Backend& b, const kernels::ModelShape& shape, const kernels::LayerWeights& lw,
                        int expert, kernels::RunState& s, int m, std::vector<float>& host) {
  const std::size_t ffn = static_cast<std::size_t>(shape.ffn_dim), count = static_cast<std::size_t>(m) * ffn;
  host.resize(2 * count);
  float* gate = host.data();
  float* up = host.data() + count;
  b.to_host(s.gate, gate, count);
  b.to_host(s.up, up, count);
  for (std::size_t i = 0; i < count; ++i) {
    float g = gate[i], u = up[i];
    if (shape.expert_biases) {
      g += lw.expert_gate_bias[expert][i % ffn];
      u += lw.expert_up_bias[expert][i % ffn];
    }
    gate[i] = shape.swiglu_limit > 0.0f ? kernels::clamped_swiglu_element(g, u, shape.swiglu_alpha, shape.swiglu_limit)
                                        : kernels::swiglu_element(g, u);
  }
  b.from_host(gate, s.gate, count);
}

}  // namespace

void routed_ffn(kernels::Backend& b, const kernels::ModelShape& shape, const kernels::LayerWeights& lw,
                kernels::RunState& s, int n, std::vector<ExpertChoice>& choices) {
  const std::size_t dim = static_cast<std::size_t>(shape.dim);
  const int k = shape.n_experts_used;
  std::vector<float> logits(static_cast<std::size_t>(n) * shape.n_experts);
  b.matmul(lw.router, s.xb, n, s.router_logits);
  b.to_host(s.router_logits, logits.data(), logits.size());
  if (!lw.router_bias.empty())
    for (int r = 0; r < n; ++r)
      for (int e = 0; e < shape.n_experts; ++e) logits[static_cast<std::size_t>(r) * shape.n_experts + e] += lw.router_bias[e];
  choices.clear();
  choices.reserve(static_cast<std::size_t>(n) * k);
  for (int r = 0; r < n; ++r) {
    const float* row_logits = logits.data() + static_cast<std::size_t>(r) * shape.n_experts;
    const auto row = shape.router_softmax_after_topk
                         ? route_token_topk_softmax(row_logits, shape.n_experts, k)
                         : route_token(row_logits, shape.n_experts, k, shape.expert_weights_norm);
    choices.insert(choices.end(), row.begin(), row.end());
  }

  // Each expert takes the rows routed to it as one batch (gathered on the host), as transformers' loop over
  // experts does; the outputs are summed per row in float32.
  std::vector<float> input(static_cast<std::size_t>(n) * dim), sum(input.size(), 0.0f), gathered, output, hidden;
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
    if (shape.expert_biases || shape.swiglu_limit > 0.0f)
      gpt_oss_activation(b, shape, lw, e, s, m, hidden);
    else
      b.swiglu(s.gate, s.up, s.gate, static_cast<std::size_t>(m) * shape.ffn_dim);
    b.matmul(lw.expert_down[e], s.gate, m, s.proj);
    output.resize(gathered.size());
    b.to_host(s.proj, output.data(), output.size());
    if (shape.expert_biases)
      for (int i = 0; i < m; ++i)
        for (std::size_t d = 0; d < dim; ++d) output[i * dim + d] += lw.expert_down_bias[e][d];
    for (int i = 0; i < m; ++i)
      for (std::size_t d = 0; d < dim; ++d) sum[rows[i] * dim + d] += weights[i] * output[i * dim + d];
  }
  b.from_host(sum.data(), s.proj, sum.size());
  b.add(s.x, s.proj, sum.size());
}

}  // namespace kvscope::engine
