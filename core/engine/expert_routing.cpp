#include "core/engine/expert_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvscope::engine {

std::vector<ExpertChoice> route_token(const float* router_logits, int n_experts, int k, bool renormalize) {
  std::vector<float> probs(router_logits, router_logits + n_experts);
  const float top = *std::max_element(probs.begin(), probs.end());
  float sum = 0.0f;
  for (float& p : probs) sum += (p = std::exp(p - top));
  for (float& p : probs) p /= sum;
  std::vector<int> order(static_cast<std::size_t>(n_experts));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return probs[a] > probs[b]; });
  std::vector<ExpertChoice> chosen;
  float chosen_sum = 0.0f;
  for (int i = 0; i < k; ++i) {
    chosen.push_back({order[i], probs[order[i]]});
    chosen_sum += probs[order[i]];
  }
  if (renormalize)
    for (ExpertChoice& c : chosen) c.weight /= chosen_sum;
  return chosen;
}

std::vector<ExpertChoice> route_token_topk_softmax(const float* router_logits, int n_experts, int k) {
  std::vector<int> order(static_cast<std::size_t>(n_experts));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return router_logits[a] > router_logits[b]; });
  std::vector<ExpertChoice> chosen;
  float sum = 0.0f;
  for (int i = 0; i < k; ++i) {  // order[0] holds the largest logit, so every exponent is <= 0
    chosen.push_back({order[i], std::exp(router_logits[order[i]] - router_logits[order[0]])});
    sum += chosen.back().weight;
  }
  for (ExpertChoice& c : chosen) c.weight /= sum;
  return chosen;
}

}  // namespace kvscope::engine
