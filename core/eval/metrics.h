#pragma once
// How far a compressed cache's next-token distributions are from the full cache's, over the same tokens
// (teacher forcing), and perplexity from per-token log-probabilities. All in nats.
#include <vector>

namespace kvscope::eval {

// log softmax(logits), computed stably (max subtracted, sums in double).
std::vector<float> log_softmax(const float* logits, int n);
// Index of the largest value; the first one on ties.
int argmax(const float* values, int n);
// KL(P || Q) = sum_i p_i (log p_i - log q_i) from log-probabilities; terms with p_i = 0 add nothing.
double kl_divergence(const float* log_p, const float* log_q, int n);
// exp(-mean log p) over the tokens; throws Error for an empty list.
double perplexity(const std::vector<double>& token_logprobs);

// One teacher-forced comparison: step t predicts tokens[t] under both caches.
struct FidelityScore {
  int steps = 0;
  double top1_agreement = 0.0;  // share of steps whose most likely next token is the same
  int agreeing_prefix = 0;      // steps before the first one whose most likely tokens differ (greedy texts equal)
  double kl_mean = 0.0, kl_max = 0.0;
  // mean over steps of log p_full(tokens[t]) - log p_policy(tokens[t]); > 0: the policy finds the text less likely
  double logprob_gap = 0.0;
};

// reference/policy: [steps][vocab] log-probabilities; tokens: [steps]. Throws Error on mismatched shapes.
FidelityScore score_fidelity(const std::vector<std::vector<float>>& reference,
                             const std::vector<std::vector<float>>& policy, const std::vector<int>& tokens);

}  // namespace kvscope::eval
