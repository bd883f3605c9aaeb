#pragma once
// Drives a policy the way the engine does, on a tiny KVCache filled with random keys and values, with
// attention probabilities taken from an explicit table instead of a model. The same table is what the
// tests' plain reference computations read, so a test can compare the policy's kept set with its own.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "core/cache/kv_cache.h"
#include "core/policy/policy.h"

namespace kvscope::test {

using observation::Phase;

struct Shape {
  int layers = 2;
  int heads = 9;     // query heads
  int kv_heads = 3;  // group = heads / kv_heads
  int head_dim = 4;
  int group() const { return heads / kv_heads; }
};

inline model::ModelConfig config_of(const Shape& s) {
  model::ModelConfig c;
  c.architecture = "llama";
  c.n_layers = s.layers;
  c.n_heads = s.heads;
  c.n_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.dim = s.heads * s.head_dim;
  c.context_length = 4096;
  c.rope_dim = s.head_dim;  // rope_base 10000, adjacent pairs: for scorers that rotate queries (snapkv's decode window)
  return c;
}

// Unnormalised attention weights w[layer][head][query position][key position], heavy-tailed so that the
// scores of different keys are far apart. A query's probabilities over the keys present in the cache are
// its weights over those keys, normalised; keys after the query get zero (causal).
class AttentionTable {
 public:
  AttentionTable(const Shape& shape, int max_tokens, unsigned seed) : shape_(shape), max_(max_tokens) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.5f);
    w_.resize(static_cast<std::size_t>(shape.layers) * shape.heads * max_tokens * max_tokens);
    for (float& x : w_) x = std::exp(normal(rng));
  }
  double weight(int layer, int head, int q, int k) const {
    return w_[((static_cast<std::size_t>(layer) * shape_.heads + head) * max_ + q) * max_ + k];
  }
  // Probabilities of query position q over the key positions `keys` (in that order).
  std::vector<double> row(int layer, int head, int q, const std::vector<int>& keys) const {
    std::vector<double> p(keys.size(), 0.0);
    double total = 0.0;
    for (std::size_t j = 0; j < keys.size(); ++j)
      if (keys[j] <= q) total += p[j] = weight(layer, head, q, keys[j]);
    for (double& x : p) x /= total;
    return p;
  }
  const Shape& shape() const { return shape_; }

 private:
  Shape shape_;
  int max_;
  std::vector<float> w_;
};

class PolicyDriver {
 public:
  PolicyDriver(const AttentionTable& table, policy::Policy& policy, int prompt_length, int budget, int decode_steps)
      : table_(table),
        policy_(policy),
        shape_(table.shape()),
        cache_(shape_.layers, shape_.kv_heads, shape_.head_dim),
        prompt_length_(prompt_length) {
    policy::RunInfo info;
    info.config = config_of(shape_);
    info.prompt_length = prompt_length;
    info.budget = budget;
    info.max_new_tokens = decode_steps;
    policy_.begin(info);
  }

  // Runs the prompt in the policy's blocks and then `decode_steps` single tokens; `after` sees every step.
  void run(int decode_steps, const std::function<void(const observation::StepInfo&)>& after = {}) {
    const int block = policy_.prefill_block_size() > 0 ? policy_.prefill_block_size() : prompt_length_;
    for (int start = 0, index = 0; start < prompt_length_; start += block, ++index) {
      const int n = std::min(block, prompt_length_ - start);
      step({Phase::Prefill, index, start + n, start + n == prompt_length_}, n);
      if (after) after(last_);
    }
    for (int i = 0; i < decode_steps; ++i) {
      step({Phase::Decode, i, seq_len_ + 1, true}, 1);
      if (after) after(last_);
    }
  }

  // Positions held by (layer, kv head), in cache order.
  std::vector<int> kept(int layer, int kv_head) const {
    auto p = cache_.positions(layer, kv_head);
    return {p.begin(), p.end()};
  }
  const cache::KVCache& cache() const { return cache_; }
  int edits() const { return edits_; }
  const cache::CacheEdit& last_edit() const { return last_edit_; }

 private:
  void step(const observation::StepInfo& info, int n) {
    std::vector<int32_t> positions(n);
    for (int i = 0; i < n; ++i) positions[i] = seq_len_ + i;
    std::normal_distribution<float> normal;
    const std::size_t width = static_cast<std::size_t>(n) * shape_.kv_heads * shape_.head_dim;
    for (int l = 0; l < shape_.layers; ++l) {
      std::vector<float> k(width), v(width);
      for (float& x : k) x = normal(rng_);
      for (float& x : v) x = normal(rng_);
      cache_.append(l, k.data(), v.data(), n, positions.data());
    }
    seq_len_ += n;
    for (int l = 0; l < shape_.layers; ++l) {
      const observation::ObservationRequest request = policy_.request(l, info.phase);
      if (!request.any()) continue;
      apply(policy_.after_layer(observe(l, info, positions, request), cache_));
    }
    apply(policy_.after_step(info, cache_));
    for (int l = 0; l < shape_.layers; ++l)
      for (int g = 0; g < shape_.kv_heads; ++g) {
        INFO("layer " << l << " kv head " << g << " after " << (info.phase == Phase::Prefill ? "prefill " : "decode ")
                      << info.step);
        REQUIRE(cache_.size(l, g) == policy_.expected_length(l, g, info));
      }
    last_ = info;
  }

  void apply(const cache::CacheEdit& edit) {
    if (edit.empty()) return;
    ++edits_;
    cache_.apply(edit);
    last_edit_ = edit;
  }

  // The observation, by direct loops over the table's probability rows.
  observation::AttentionObservation observe(int layer, const observation::StepInfo& info, const std::vector<int32_t>& queries,
                                       const observation::ObservationRequest& request) const {
    observation::AttentionObservation obs;
    obs.layer = layer;
    obs.phase = info.phase;
    obs.step = info.step;
    obs.prefill_done = info.prefill_done;
    obs.n_heads = shape_.heads;
    obs.n_kv_heads = shape_.kv_heads;
    obs.query_positions = queries;
    const int n = static_cast<int>(queries.size());
    for (int g = 0; g < shape_.kv_heads; ++g) obs.n_keys.push_back(cache_.size(layer, g));
    obs.window = request.window > 0 ? std::min(request.window, n) : 0;
    obs.column_sums.resize(request.column_sums ? shape_.heads : 0);
    obs.window_sums.resize(request.window_sums ? shape_.heads : 0);
    obs.window_rows.resize(request.window_rows ? shape_.heads : 0);
    obs.last_row.resize(request.last_row ? shape_.heads : 0);
    for (int h = 0; h < shape_.heads; ++h) {
      const int g = h / shape_.group();
      auto pos = cache_.positions(layer, g);
      const std::vector<int> keys(pos.begin(), pos.end());
      const std::size_t m = keys.size();
      if (request.column_sums) obs.column_sums[h].assign(m, 0.0f);
      if (request.window_sums) obs.window_sums[h].assign(m, 0.0f);
      if (request.window_rows) obs.window_rows[h].assign(obs.window * m, 0.0f);
      for (int i = 0; i < n; ++i) {
        const std::vector<double> p = table_.row(layer, h, queries[i], keys);
        const int wi = i - (n - obs.window);
        for (std::size_t j = 0; j < m; ++j) {
          if (request.column_sums) obs.column_sums[h][j] += static_cast<float>(p[j]);
          if (request.window_sums && wi >= 0) obs.window_sums[h][j] += static_cast<float>(p[j]);
          if (request.window_rows && wi >= 0) obs.window_rows[h][wi * m + j] = static_cast<float>(p[j]);
        }
        if (request.last_row && i == n - 1) obs.last_row[h].assign(p.begin(), p.end());
      }
    }
    if (request.queries_pre_rope) obs.queries_pre_rope = queries_pre_rope(layer, queries);
    return obs;
  }

 public:
  // Queries before RoPE [query][head][head_dim] for the `queries` positions of `layer`: normal draws seeded by
  // (layer, position), so that a position's queries are the same wherever they are asked for.
  std::vector<float> queries_pre_rope(int layer, const std::vector<int32_t>& queries) const {
    std::vector<float> out;
    for (const int32_t q : queries) {
      std::mt19937 rng(static_cast<unsigned>(layer * 100003 + q * 7 + 1));
      std::normal_distribution<float> normal;
      for (int e = 0; e < shape_.heads * shape_.head_dim; ++e) out.push_back(normal(rng));
    }
    return out;
  }

 private:

  const AttentionTable& table_;
  policy::Policy& policy_;
  Shape shape_;
  cache::KVCache cache_;
  int prompt_length_;
  int seq_len_ = 0;
  int edits_ = 0;
  cache::CacheEdit last_edit_;
  observation::StepInfo last_;
  std::mt19937 rng_{12345};
};

// The `k` highest of `scores` (ties to the smaller position), by repeated selection of the maximum.
// scores: (position, score) pairs.
inline std::vector<int> top_k_by_hand(std::vector<std::pair<int, double>> scores, int k) {
  std::vector<int> out;
  for (int round = 0; round < k && !scores.empty(); ++round) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < scores.size(); ++i)
      if (scores[i].second > scores[best].second ||
          (scores[i].second == scores[best].second && scores[i].first < scores[best].first))
        best = i;
    out.push_back(scores[best].first);
    scores.erase(scores.begin() + static_cast<long>(best));
  }
  return out;
}

inline std::vector<int> sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace kvscope::test
