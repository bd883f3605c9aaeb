// Compactor (kvpress CompactorPress; Chari & Van Durme 2025, "Compactor: Calibrated Query-Agnostic KV Cache
// Compression with Approximate Leverage Scores", §3). Between the `sink_size_start` first and `sink_size_end` last
// tokens (always kept), a token scores
//   s_j = blending x z(l_j) + z(a_j),
// where l_j is the statistical leverage of its key among the middle tokens' centred keys before RoPE (§3.1, kvpress
// LeverageScorePress): with X the centred keys projected on a Gaussian sketch Phi of `sketch_dimension` columns
// (X Phi; the exact keys when 0), l_j = x_j^T (X^T X + 1e-2 I)^-1 x_j clamped at 0 (kvpress's first Cholesky try adds
// 1e-2 I); a_j is the non-causal chunked attention score (non_causal_attn.h, §3.2); z is the z-score over the layer.
// kvpress draws Phi with torch.randn from the global generator, one call per layer; this port replays that generator
// as if torch.manual_seed(seed) ran just before the prefill (torch_cpu_rng.h) and multiplies the keys in transformers'
// rotate-half head-dimension order, as examples/policies/compactor.py does. kvpress blends with the compression
// ratio, which a policy is not told: give blending=R with --compression-ratio R (the default -1 takes
// 1 - budget / prompt_length, R up to kvpress's truncation). Prefill only. See docs/policies.md, "compactor".
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/policy/catalog.h"
#include "core/policy/layer_scorer.h"
#include "core/policy/non_causal_attn.h"
#include "core/policy/torch_cpu_rng.h"

namespace kvscope::policy {

namespace {

constexpr double kJitter = 1e-2;  // kvpress's first Cholesky try adds 1e-2 I to the Gram matrix

// x (rows, cols) row-major -> diag(x (x^T x + jitter I)^-1 x^T), clamped at 0, by a Cholesky factor G = L L^T:
// l_j = |L^-1 x_j|^2.
std::vector<double> leverage(const std::vector<double>& x, int rows, int cols) {
  std::vector<double> g(static_cast<std::size_t>(cols) * cols);
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, cols, rows, 1.0, x.data(), cols, x.data(), cols, 0.0,
              g.data(), cols);
  for (int i = 0; i < cols; ++i) {
    for (int j = 0; j < i; ++j) g[i * cols + j] = g[j * cols + i] = 0.5 * (g[i * cols + j] + g[j * cols + i]);
    g[i * cols + i] += kJitter;
  }
  for (int j = 0; j < cols; ++j) {  // L in the lower triangle
    double diag = g[j * cols + j];
    for (int k = 0; k < j; ++k) diag -= g[j * cols + k] * g[j * cols + k];
    if (!(diag > 0.0)) throw Error("compactor: the keys' Gram matrix is not positive definite");
    g[j * cols + j] = std::sqrt(diag);
    for (int i = j + 1; i < cols; ++i) {
      double v = g[i * cols + j];
      for (int k = 0; k < j; ++k) v -= g[i * cols + k] * g[j * cols + k];
      g[i * cols + j] = v / g[j * cols + j];
    }
  }
  std::vector<double> y = x;  // rows of x solved as L y^T = x^T: y = x L^-T
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, rows, cols, 1.0, g.data(), cols,
              y.data(), cols);
  std::vector<double> out(rows);
  for (int r = 0; r < rows; ++r) {
    double s = 0.0;
    for (int c = 0; c < cols; ++c)
      s += y[static_cast<std::size_t>(r) * cols + c] * y[static_cast<std::size_t>(r) * cols + c];
    out[r] = std::max(s, 0.0);
  }
  return out;
}

class CompactorPolicy final : public LayerScorer {
 public:
  CompactorPolicy(std::string name, const PolicyParams& p)
      : LayerScorer(std::move(name), p),
        sink_start_(p.get_int("sink_size_start")),
        sink_end_(p.get_int("sink_size_end")),
        chunk_(p.get_int("chunk_size")),
        sketch_(p.get_int("sketch_dimension")),
        seed_(static_cast<uint32_t>(p.get_int("seed"))),
        blending_(p.get_float("blending")) {}

 protected:
  void on_begin(const RunInfo& info) override {
    LayerScorer::on_begin(info);
    draws_.clear();
  }

  std::vector<std::vector<double>> score_layer(const AttentionObservation& obs, const cache::KVCache& cache) override {
    const int n = cache.size(obs.layer, 0), n_kv = cache.n_kv_heads();
    if (obs.n_queries() != n)
      throw Error("policy '" + name() + "' scores a prompt it saw whole: layer " + std::to_string(obs.layer) +
                  " holds " + std::to_string(n) + " entries, the step had " + std::to_string(obs.n_queries()) +
                  " queries");
    const int left = std::min(sink_start_, n), right = std::min(sink_end_, std::max(0, n - left));
    const int count = n - left - right;
    std::vector<std::vector<double>> out(n_kv, std::vector<double>(n, 0.0));
    if (count == 0) return out;  // every entry is a sink
    const std::vector<double> lev = leverage_scores(obs, cache, left, count);
    const std::vector<double> attn =
        non_causal_attention_scores(project(obs, left, count, 'q'), std::span(obs.query_positions).subspan(left, count),
                                    rope(), cache, obs.layer, left, count, obs.n_heads, chunk_);
    const double blending = blending_ >= 0 ? blending_
                                           : 1.0 - static_cast<double>(layer_budgets().at(obs.layer)) /
                                                       static_cast<double>(run_info().prompt_length);
    double top = -INFINITY;
    for (int h = 0; h < n_kv; ++h)
      for (int j = 0; j < count; ++j) {
        const std::size_t at = static_cast<std::size_t>(h) * count + j;
        top = std::max(top, out[h][left + j] = blending * lev[at] + attn[at]);
      }
    for (auto& o : out) {
      std::fill(o.begin(), o.begin() + left, top);
      std::fill(o.end() - right, o.end(), top);
    }
    return out;
  }

 private:
  // (n_kv_heads, count), z-normalised over the layer: the leverage of entries [first, first + count)'s keys before
  // RoPE (the layer input projected by k_proj), in transformers' rotate-half head-dimension order.
  std::vector<double> leverage_scores(const AttentionObservation& obs, const cache::KVCache& cache, int first,
                                      int count) {
    const int n_kv = cache.n_kv_heads(), d = cache.head_dim(), width = n_kv * d;
    const std::vector<double> keys = project(obs, first, count, 'k');  // (count, n_kv x d)
    // a llama GGUF pairs dimensions (2i, 2i+1), transformers (i, i + rope_dim/2): its order takes 0, 2, .., 1, 3, ..
    std::vector<int> order(d);
    const int r = rope().rope_dim;
    for (int i = 0; i < d; ++i) order[i] = !rope().adjacent || i >= r ? i : i < r / 2 ? 2 * i : 2 * (i - r / 2) + 1;
    const int cols = sketch_ > 0 ? sketch_ : d;
    const std::size_t block = static_cast<std::size_t>(n_kv) * d * sketch_;
    if (sketch_ > 0 && draws_.size() < (obs.layer + 1) * block)
      draws_ = torch_randn_stream(
          seed_, std::max<std::size_t>(static_cast<std::size_t>(run_info().config.n_layers), obs.layer + 1) * block);
    const double scale = static_cast<double>(static_cast<float>(1.0 / std::sqrt(static_cast<double>(sketch_))));
    std::vector<double> out(static_cast<std::size_t>(n_kv) * count), x(static_cast<std::size_t>(count) * d), mean(d),
        phi(static_cast<std::size_t>(d) * cols), sketched(static_cast<std::size_t>(count) * cols);
    for (int h = 0; h < n_kv; ++h) {
      std::fill(mean.begin(), mean.end(), 0.0);
      for (int j = 0; j < count; ++j)
        for (int c = 0; c < d; ++c)
          mean[c] += x[static_cast<std::size_t>(j) * d + c] =
              keys[static_cast<std::size_t>(j) * width + h * d + order[c]];
      for (double& m : mean) m /= count;
      for (int j = 0; j < count; ++j)
        for (int c = 0; c < d; ++c) x[static_cast<std::size_t>(j) * d + c] -= mean[c];
      std::vector<double> lev;
      if (sketch_ > 0) {
        const float* draws = draws_.data() + obs.layer * block + static_cast<std::size_t>(h) * d * sketch_;
        for (std::size_t i = 0; i < phi.size(); ++i) phi[i] = static_cast<double>(draws[i]) * scale;
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, count, cols, d, 1.0, x.data(), d, phi.data(), cols, 0.0,
                    sketched.data(), cols);
        lev = leverage(sketched, count, cols);
      } else {
        lev = leverage(x, count, d);
      }
      std::copy(lev.begin(), lev.end(), out.begin() + static_cast<std::ptrdiff_t>(h) * count);
    }
    z_normalise(out);
    return out;
  }

  int sink_start_, sink_end_, chunk_, sketch_;
  uint32_t seed_;
  double blending_;
  std::vector<float> draws_;  // torch.randn's stream after manual_seed(seed): layer l's sketch is its l-th block
};

}  // namespace

PolicyInfo compactor_policy_info() {
  return {"compactor",
          "kvpress CompactorPress: blended z-scores of the keys' leverage (a seeded Gaussian sketch) and non-causal "
          "chunked attention; compresses the prompt once",
          "Chari & Van Durme 2025, Compactor: Calibrated Query-Agnostic KV Cache Compression with Approximate Leverage "
          "Scores, §3 (kvpress CompactorPress)",
          layer_scorer_params(
              {ParamSpec::integer("sink_size_start", 8, 0, 1 << 20, "first tokens always kept (kvpress: 8)"),
               ParamSpec::integer("sink_size_end", 4, 0, 1 << 20, "last tokens always kept (kvpress: 4)"),
               ParamSpec::integer("chunk_size", 256, 1, 1 << 20,
                                  "tokens per chunk of the non-causal attention (kvpress: 256)"),
               ParamSpec::integer("sketch_dimension", 48, 0, 1 << 16,
                                  "columns of the leverage's Gaussian sketch (0: exact; kvpress: 48)"),
               ParamSpec::integer("seed", 0, 0, 2147483647,
                                  "torch.manual_seed given before the prefill, whose draws the sketch replays"),
               ParamSpec::real("blending", -1.0, -1.0, 1e6,
                               "weight of the leverage scores (kvpress: the compression ratio); -1: 1 - budget / "
                               "prompt_length")}),
          [](const PolicyParams& p) -> std::unique_ptr<Policy> {
            return std::make_unique<CompactorPolicy>("compactor", p);
          }};
}

}  // namespace kvscope::policy
