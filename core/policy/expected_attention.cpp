// Expected attention (kvpress ExpectedAttentionPress; Devoto et al. 2025, "Expected Attention: KV Cache Compression
// by Estimating Attention from Future Queries Distribution", §3). Future queries are modelled as Gaussian: the
// prompt's queries after the first `n_sink` (the layer input projected by q_proj, before RoPE) give per query head a
// mean mu and covariance Sigma, both rotated by RoPE averaged over the next `n_future_positions` positions
// (R = mean_p R_p: mu' = R mu, Sigma' = R Sigma R^T). A key's expected logit follows from the Gaussian's moment
// generating function (Eq. 5):
//   z_j = k_j . mu' / sqrt(d) + k_j^T Sigma' k_j / (2 d),   s_j = softmax_j(z)_j,
// averaged over the KV head's query heads, then (s_j + epsilon) |v_j| with use_vnorm; the sinks are always kept
// (scored max + 1, as examples/policies/expected_attention.py scores them). The averaged rotation is built with the
// engine's own RoPE (rope_rotation.h), in the model file's head-dimension order, so it holds for either pair layout
// and any rope scaling. Keeps what kvpress and the Python file keep. Prefill only. See docs/policies.md,
// "expected_attention".
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/common/error.h"
#include "core/policy/catalog.h"
#include "core/policy/layer_scorer.h"

namespace kvscope::policy {

namespace {

class ExpectedAttentionPolicy final : public LayerScorer {
 public:
  ExpectedAttentionPolicy(std::string name, const PolicyParams& p)
      : LayerScorer(std::move(name), p),
        n_future_(p.get_int("n_future_positions")),
        n_sink_(p.get_int("n_sink")),
        use_covariance_(p.get_bool("use_covariance")),
        use_vnorm_(p.get_bool("use_vnorm")),
        epsilon_(p.get_float("epsilon")) {}

 protected:
  void on_begin(const RunInfo& info) override {
    LayerScorer::on_begin(info);
    rotation_start_ = -1;
  }

  std::vector<std::vector<double>> score_layer(const AttentionObservation& obs, const cache::KVCache& cache) override {
    const int n = cache.size(obs.layer, 0), d = cache.head_dim(), heads = obs.n_heads, n_kv = cache.n_kv_heads();
    const int group = heads / n_kv, width = heads * d;
    if (obs.n_queries() != n)
      throw Error("policy '" + name() + "' scores a prompt it saw whole: layer " + std::to_string(obs.layer) +
                  " holds " + std::to_string(n) + " entries, the step had " + std::to_string(obs.n_queries()) +
                  " queries");
    const int sink = std::min(n_sink_, n), m = n - sink, nk = n - sink;
    std::vector<std::vector<double>> out(n_kv, std::vector<double>(n, 0.0));
    if (m == 0) return out;                                    // every entry is a sink
    const std::vector<double> q = project(obs, sink, m, 'q');  // (m, heads x d)
    const std::vector<double>& rot = averaged_rotation(n, d);  // x @ rot: x rotated, averaged over positions
    // per query head: mu' = mu @ rot, and Sigma' = rot^T Sigma rot
    std::vector<double> mean(width, 0.0);
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < width; ++c) mean[c] += q[static_cast<std::size_t>(r) * width + c];
    for (double& v : mean) v /= m;
    std::vector<double> scores(static_cast<std::size_t>(heads) * nk);
    std::vector<std::vector<double>> keys(n_kv);
    for (int kv = 0; kv < n_kv; ++kv) {
      const auto k32 = cache.keys(obs.layer, kv).subspan(static_cast<std::size_t>(sink) * d);
      keys[kv].assign(k32.begin(), k32.begin() + static_cast<std::ptrdiff_t>(nk) * d);
    }
    // Query heads are independent (their own statistics and scores), so they run in parallel, each calling
    // single-threaded BLAS as the engine's kernels do; the thread count does not change a bit.
#pragma omp parallel for schedule(dynamic, 1)
    for (int h = 0; h < heads; ++h) {
      const std::vector<double>& k = keys[h / group];
      std::vector<double> mu(d);
      const double* mean_h = mean.data() + static_cast<std::size_t>(h) * d;
      cblas_dgemv(CblasRowMajor, CblasTrans, d, d, 1.0, rot.data(), d, mean_h, 1, 0.0, mu.data(), 1);
      double* s = scores.data() + static_cast<std::size_t>(h) * nk;
      cblas_dgemv(CblasRowMajor, CblasNoTrans, nk, d, 1.0, k.data(), d, mu.data(), 1, 0.0, s, 1);
      const double root_d = std::sqrt(static_cast<double>(d));
      for (int j = 0; j < nk; ++j) s[j] /= root_d;
      if (use_covariance_) {
        std::vector<double> centred(static_cast<std::size_t>(m) * d), cov(static_cast<std::size_t>(d) * d),
            tmp(cov.size()), kc(static_cast<std::size_t>(nk) * d);
        for (int r = 0; r < m; ++r)
          for (int c = 0; c < d; ++c)
            centred[static_cast<std::size_t>(r) * d + c] =
                q[static_cast<std::size_t>(r) * width + h * d + c] - mean_h[c];
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, d, m, 1.0 / m, centred.data(), d, centred.data(), d,
                    0.0, cov.data(), d);
        // Sigma' = rot^T Sigma rot (the row-vector form of R Sigma R^T)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d, d, d, 1.0, cov.data(), d, rot.data(), d, 0.0,
                    tmp.data(), d);
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, d, d, 1.0, rot.data(), d, tmp.data(), d, 0.0,
                    cov.data(), d);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nk, d, d, 1.0, k.data(), d, cov.data(), d, 0.0,
                    kc.data(), d);
        for (int j = 0; j < nk; ++j) {
          double quad = 0.0;
          for (int c = 0; c < d; ++c)
            quad += kc[static_cast<std::size_t>(j) * d + c] * k[static_cast<std::size_t>(j) * d + c];
          s[j] += quad / d / 2;
        }
      }
      const double mx = *std::max_element(s, s + nk);
      double sum = 0.0;
      for (int j = 0; j < nk; ++j) sum += s[j] = std::exp(s[j] - mx);
      for (int j = 0; j < nk; ++j) s[j] /= sum;
    }
    double top = -INFINITY;
    for (int kv = 0; kv < n_kv; ++kv) {
      std::vector<double>& o = out[kv];
      for (int j = 0; j < nk; ++j) {
        double a = 0.0;
        for (int g = 0; g < group; ++g) a += scores[static_cast<std::size_t>(kv * group + g) * nk + j];
        o[sink + j] = a / group;
      }
      if (use_vnorm_) {
        const auto v = cache.values(obs.layer, kv);
        for (int j = 0; j < nk; ++j) {
          double norm = 0.0;
          for (int c = 0; c < d; ++c) {
            const double x = v[static_cast<std::size_t>(sink + j) * d + c];
            norm += x * x;
          }
          o[sink + j] = (o[sink + j] + epsilon_) * std::sqrt(norm);
        }
      }
      top = std::max(top, *std::max_element(o.begin() + sink, o.end()));
    }
    for (auto& o : out) std::fill(o.begin(), o.begin() + sink, top + 1);
    return out;
  }

 private:
  // M with x @ M = mean over p in [start, start + n_future) of x rotated to p, built by rotating the identity's
  // rows (float32, as the engine rotates) and averaging them in float64; kept while the prompt length is the same.
  const std::vector<double>& averaged_rotation(int start, int d) {
    if (rotation_start_ != start) {
      rotation_.assign(static_cast<std::size_t>(d) * d, 0.0);
      std::vector<float> row(d), cos_sin(rope().rope_dim);
      for (int p = start; p < start + n_future_; ++p) {
        rope().angles(p, cos_sin.data());  // the d rows rotated to p share its angles
        for (int i = 0; i < d; ++i) {
          std::fill(row.begin(), row.end(), 0.0f);
          row[i] = 1.0f;
          rope().rotate(row.data(), cos_sin.data());
          for (int c = 0; c < d; ++c) rotation_[static_cast<std::size_t>(i) * d + c] += row[c];
        }
      }
      for (double& v : rotation_) v /= n_future_;
      rotation_start_ = start;
    }
    return rotation_;
  }

  int n_future_, n_sink_;
  bool use_covariance_, use_vnorm_;
  double epsilon_;
  std::vector<double> rotation_;
  int rotation_start_ = -1;
};

}  // namespace

PolicyInfo expected_attention_policy_info() {
  return {"expected_attention",
          "kvpress ExpectedAttentionPress: the attention future queries (a Gaussian fitted to the prompt's) are "
          "expected to pay each key, times |v|; compresses the prompt once",
          "Devoto et al. 2025, Expected Attention: KV Cache Compression by Estimating Attention from Future Queries "
          "Distribution, §3, Eq. 5 (kvpress ExpectedAttentionPress)",
          layer_scorer_params(
              {ParamSpec::integer("n_future_positions", 512, 1, 1 << 20,
                                  "future query positions the RoPE rotation is averaged over (kvpress: 512)"),
               ParamSpec::integer("n_sink", 4, 0, 1 << 20,
                                  "first tokens always kept, and left out of the query statistics (kvpress: 4)"),
               ParamSpec::flag("use_covariance", true, "add the queries' covariance term k^T Sigma k / 2d (Eq. 5)"),
               ParamSpec::flag("use_vnorm", true, "multiply the expected attention by the value's norm"),
               ParamSpec::real("epsilon", 0.0, 0.0, 1e6,
                               "added to the expected attention before the value-norm rescaling (kvpress: 0)")}),
          [](const PolicyParams& p) -> std::unique_ptr<Policy> {
            return std::make_unique<ExpectedAttentionPolicy>("expected_attention", p);
          }};
}

}  // namespace kvscope::policy
