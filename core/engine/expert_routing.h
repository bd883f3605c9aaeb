#pragma once
// Which experts a mixture-of-experts layer sends a token to, computed as transformers' routers do it
// (MixtralTopKRouter, Qwen3MoeTopKRouter): a softmax over all router logits in float32, the k most probable
// experts, and, where the family renormalises (Mixtral always, Qwen3-MoE when norm_topk_prob), their
// probabilities divided by their sum.
#include <vector>

namespace kvscope::engine {

struct ExpertChoice {
  int expert = 0;
  float weight = 0.0f;  // the factor on this expert's output
};

// The k choices for one token, most probable first (ties: the lower expert index first).
std::vector<ExpertChoice> route_token(const float* router_logits, int n_experts, int k, bool renormalize);
// gpt-oss's order (GptOssTopKRouter): the k largest logits, weighted by a softmax over those k alone.
std::vector<ExpertChoice> route_token_topk_softmax(const float* router_logits, int n_experts, int k);

}  // namespace kvscope::engine
