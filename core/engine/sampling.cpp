#include "core/engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/common/error.h"

namespace kvscope::engine {

Sampler::Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature))
    throw UsageError("temperature must be a finite number >= 0");
  if (options.top_k < 0) throw UsageError("top-k must be >= 0");
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) throw UsageError("top-p must be in (0, 1]");
}

float token_logprob(const float* logits, int n, int id) {
  const float max_logit = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  return static_cast<float>(logits[id] - max_logit - std::log(sum));
}

SampledToken Sampler::sample(const float* logits, int n) {
  SampledToken out;
  if (options_.temperature == 0.0f) {
    out.id = static_cast<int>(std::max_element(logits, logits + n) - logits);
    out.logprob = token_logprob(logits, n, out.id);
    return out;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  int keep = options_.top_k > 0 ? std::min(options_.top_k, n) : n;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<double> probs(keep);
  const double max_logit = logits[order[0]];
  double sum = 0.0;
  for (int i = 0; i < keep; ++i) sum += probs[i] = std::exp((logits[order[i]] - max_logit) / options_.temperature);
  if (options_.top_p < 1.0f) {
    double cumulative = 0.0;
    int cut = keep;
    for (int i = 0; i < keep; ++i) {
      cumulative += probs[i] / sum;
      if (cumulative >= options_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    probs.resize(keep);
  }
  std::discrete_distribution<int> pick(probs.begin(), probs.end());
  out.id = order[pick(rng_)];
  out.logprob = token_logprob(logits, n, out.id);
  return out;
}

}  // namespace kvscope::engine
