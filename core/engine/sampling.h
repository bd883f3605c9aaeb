#pragma once
// Picking the next token: greedy, temperature, top-k, top-p, reproducible from a seed.
#include <cstdint>
#include <random>

namespace kvscope::engine {

struct SamplingOptions {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = no limit
  float top_p = 1.0f;        // 1 = no nucleus cut
  uint64_t seed = 0;
};

struct SampledToken {
  int id = 0;
  float logprob = 0.0f;  // log p(id) under the model's own distribution (temperature 1, no cuts)
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  SampledToken sample(const float* logits, int n);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

// log softmax(logits)[id], computed stably.
float token_logprob(const float* logits, int n, int id);

}  // namespace kvscope::engine
