// Non-causal chunked attention (kvpress NonCausalAttnPress, from Compactor: Chari & Van Durme 2025, "Compactor:
// Calibrated Query-Agnostic KV Cache Compression with Approximate Leverage Scores", §3.2). The prompt is cut into
// chunks of `chunk_size` tokens; inside a chunk every query attends to every key, without a causal mask and without
// the 1/sqrt(d) scaling (as kvpress computes it):
//   A_c = softmax_rows(Q_c K_c^T),   a_j = sum_i A_c[i, j]   (j in chunk c),
// averaged over a KV head's query heads, times |v_j|, smoothed by a 3-wide average (zero padded) and z-normalised
// over the layer. kvpress pads the last chunk to full length with zero queries and keys and sets the padded keys'
// logits to -1e-9 (so they stay in the softmax) and the padded queries' logits to 0 (so they attend uniformly):
// this port does the same, so it keeps the entries examples/policies/non_causal_attn.py and kvpress keep.
// Prefill only. See docs/policies.md, "non_causal_attn".
#include "core/policy/non_causal_attn.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/policy/catalog.h"
#include "core/policy/layer_scorer.h"

namespace kvscope::policy {

std::vector<double> non_causal_attention_scores(const std::vector<double>& queries, std::span<const int32_t> positions,
                                                const RopeRotation& rope, const cache::KVCache& cache, int layer,
                                                int first, int count, int n_heads, int chunk) {
  const int d = cache.head_dim(), n_kv = cache.n_kv_heads(), group = n_heads / n_kv, width = n_heads * d;
  // The queries rounded to float32 and rotated to their positions, as the engine (and obs.rope.rotate) rotates.
  std::vector<double> q(static_cast<std::size_t>(count) * width);
  std::vector<float> row(d), cos_sin(rope.rope_dim);
  for (int i = 0; i < count; ++i) {
    rope.angles(positions[i], cos_sin.data());  // the query heads of a token share its angles
    for (int h = 0; h < n_heads; ++h) {
      const std::size_t at = static_cast<std::size_t>(i) * width + static_cast<std::size_t>(h) * d;
      for (int e = 0; e < d; ++e) row[e] = static_cast<float>(queries[at + e]);
      rope.rotate(row.data(), cos_sin.data());
      std::copy(row.begin(), row.end(), q.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }
  // Per query head, the attention its chunks' queries pay each key. Heads are independent, so they run in
  // parallel (each calling single-threaded BLAS, as the engine's kernels do); each KV head then sums its group's
  // columns in head order, so the thread count does not change a bit.
  std::vector<double> columns(static_cast<std::size_t>(n_heads) * count, 0.0);
  const double pad_logit = -1e-9;
#pragma omp parallel for schedule(dynamic, 1)
  for (int head = 0; head < n_heads; ++head) {
    const int kv = head / group;
    const auto k32 =
        cache.keys(layer, kv).subspan(static_cast<std::size_t>(first) * d, static_cast<std::size_t>(count) * d);
    const std::vector<double> keys(k32.begin(), k32.end());
    std::vector<double> dots(static_cast<std::size_t>(chunk) * chunk), e(chunk);
    double* column = columns.data() + static_cast<std::size_t>(head) * count;
    for (int r0 = 0; r0 < count; r0 += chunk) {
      const int len = std::min(chunk, count - r0), pad = chunk - len;
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, len, len, d, 1.0,
                  q.data() + static_cast<std::size_t>(r0) * width + static_cast<std::size_t>(head) * d, width,
                  keys.data() + static_cast<std::size_t>(r0) * d, d, 0.0, dots.data(), len);
      // softmax over the chunk's columns: the len real keys and `pad` padded keys at -1e-9
      for (int i = 0; i < len; ++i) {
        const double* l = dots.data() + static_cast<std::size_t>(i) * len;
        double mx = *std::max_element(l, l + len);
        if (pad > 0) mx = std::max(mx, pad_logit);
        double sum = 0.0;
        for (int j = 0; j < len; ++j) sum += e[j] = std::exp(l[j] - mx);
        sum += pad * std::exp(pad_logit - mx);
        for (int j = 0; j < len; ++j) column[r0 + j] += e[j] / sum;
      }
      // padded queries: logits 0 on the real keys, -1e-9 on the padded ones
      if (pad > 0) {
        const double share = 1.0 / (len + pad * std::exp(pad_logit));
        for (int i = 0; i < pad; ++i)
          for (int j = 0; j < len; ++j) column[r0 + j] += share;
      }
    }
  }
  std::vector<double> attention(static_cast<std::size_t>(n_kv) * count, 0.0);
  for (int kv = 0; kv < n_kv; ++kv) {
    double* a = attention.data() + static_cast<std::size_t>(kv) * count;
    for (int g = 0; g < group; ++g) {
      const double* column = columns.data() + static_cast<std::size_t>(kv * group + g) * count;
      for (int j = 0; j < count; ++j) a[j] += column[j];
    }
    const auto v = cache.values(layer, kv);
    for (int j = 0; j < count; ++j) {
      double norm = 0.0;
      for (int c = 0; c < d; ++c) {
        const double x = v[static_cast<std::size_t>(first + j) * d + c];
        norm += x * x;
      }
      a[j] = a[j] / group * std::sqrt(norm);
    }
  }
  // the 3-wide average, zero padded at both ends
  std::vector<double> smooth(attention.size());
  for (int kv = 0; kv < n_kv; ++kv) {
    const double* s = attention.data() + static_cast<std::size_t>(kv) * count;
    double* out = smooth.data() + static_cast<std::size_t>(kv) * count;
    for (int j = 0; j < count; ++j) out[j] = ((j > 0 ? s[j - 1] : 0.0) + s[j] + (j + 1 < count ? s[j + 1] : 0.0)) / 3;
  }
  z_normalise(smooth);
  return smooth;
}

namespace {

class NonCausalAttnPolicy final : public LayerScorer {
 public:
  NonCausalAttnPolicy(std::string name, const PolicyParams& p)
      : LayerScorer(std::move(name), p), chunk_(p.get_int("chunk_size")) {}

 protected:
  std::vector<std::vector<double>> score_layer(const AttentionObservation& obs, const cache::KVCache& cache) override {
    const int n = cache.size(obs.layer, 0);
    if (obs.n_queries() != n)
      throw Error("policy '" + name() + "' scores a prompt it saw whole: layer " + std::to_string(obs.layer) +
                  " holds " + std::to_string(n) + " entries, the step had " + std::to_string(obs.n_queries()) +
                  " queries");
    const std::vector<double> s = non_causal_attention_scores(project(obs, 0, n, 'q'), obs.query_positions, rope(),
                                                              cache, obs.layer, 0, n, obs.n_heads, chunk_);
    std::vector<std::vector<double>> out(cache.n_kv_heads());
    for (int h = 0; h < cache.n_kv_heads(); ++h)
      out[h].assign(s.begin() + static_cast<std::ptrdiff_t>(h) * n, s.begin() + static_cast<std::ptrdiff_t>(h + 1) * n);
    return out;
  }

 private:
  int chunk_;
};

}  // namespace

PolicyInfo non_causal_attn_policy_info() {
  return {"non_causal_attn",
          "kvpress NonCausalAttnPress: attention inside chunks of the prompt without a causal mask, times |v|; "
          "compresses the prompt once",
          "Chari & Van Durme 2025, Compactor: Calibrated Query-Agnostic KV Cache Compression with Approximate "
          "Leverage Scores, §3.2 (kvpress NonCausalAttnPress)",
          layer_scorer_params({ParamSpec::integer(
              "chunk_size", 256, 1, 1 << 20, "prompt tokens per chunk of the non-causal attention (kvpress: 256)")}),
          [](const PolicyParams& p) -> std::unique_ptr<Policy> {
            return std::make_unique<NonCausalAttnPolicy>("non_causal_attn", p);
          }};
}

}  // namespace kvscope::policy
