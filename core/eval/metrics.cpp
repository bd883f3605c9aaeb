#include "core/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/common/error.h"

namespace kvscope::eval {

std::vector<float> log_softmax(const float* logits, int n) {
  const float max = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_z = max + std::log(sum);
  std::vector<float> out(n);
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(logits[i] - log_z);
  return out;
}

int argmax(const float* values, int n) { return static_cast<int>(std::max_element(values, values + n) - values); }

double kl_divergence(const float* log_p, const float* log_q, int n) {
  double kl = 0.0;
  for (int i = 0; i < n; ++i) {
    const double p = std::exp(static_cast<double>(log_p[i]));
    if (p > 0.0) kl += p * (static_cast<double>(log_p[i]) - log_q[i]);
  }
  return std::max(kl, 0.0);  // rounding can leave -1e-9 for identical distributions
}

double perplexity(const std::vector<double>& token_logprobs) {
  if (token_logprobs.empty()) throw Error("perplexity of zero tokens is undefined");
  double sum = 0.0;
  for (double lp : token_logprobs) sum += lp;
  return std::exp(-sum / token_logprobs.size());
}

FidelityScore score_fidelity(const std::vector<std::vector<float>>& reference,
                             const std::vector<std::vector<float>>& policy, const std::vector<int>& tokens) {
  if (reference.size() != policy.size() || reference.size() != tokens.size())
    throw Error("fidelity: " + std::to_string(reference.size()) + " reference steps, " + std::to_string(policy.size()) +
                " policy steps and " + std::to_string(tokens.size()) + " tokens; expected the same count");
  FidelityScore s;
  s.steps = static_cast<int>(tokens.size());
  if (s.steps == 0) return s;
  int agree = 0;
  bool diverged = false;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const auto& p = reference[t];
    const auto& q = policy[t];
    const int n = static_cast<int>(p.size());
    if (q.size() != p.size() || tokens[t] < 0 || tokens[t] >= n)
      throw Error("fidelity: step " + std::to_string(t) + " has vocabularies of " + std::to_string(p.size()) + " and " +
                  std::to_string(q.size()) + " for token " + std::to_string(tokens[t]));
    const bool same_top1 = argmax(p.data(), n) == argmax(q.data(), n);
    agree += same_top1;
    diverged = diverged || !same_top1;
    s.agreeing_prefix += !diverged;
    const double kl = kl_divergence(p.data(), q.data(), n);
    s.kl_mean += kl;
    s.kl_max = std::max(s.kl_max, kl);
    s.logprob_gap += static_cast<double>(p[tokens[t]]) - q[tokens[t]];
  }
  s.top1_agreement = static_cast<double>(agree) / s.steps;
  s.kl_mean /= s.steps;
  s.logprob_gap /= s.steps;
  return s;
}

}  // namespace kvscope::eval
