#include "core/policy/layer_scorer.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "core/common/error.h"
#include "kernels/common/dequantize.h"

namespace kvscope::policy {

namespace {

// `params` with the fixed protocol's switches, which ScoredPolicy reads.
PolicyParams with_one_pass_protocol(PolicyParams params) {
  params.set_number("block", 0);
  params.set_number("decode_evict", 0);
  params.set_choice("trim", "after_output");
  return params;
}

}  // namespace

LayerScorer::LayerScorer(std::string name, const PolicyParams& params)
    : ScoredPolicy(std::move(name), with_one_pass_protocol(params)) {}

void LayerScorer::on_begin(const RunInfo& info) {
  rope_ = RopeRotation(info.config);
  projections_.clear();  // another run may bring another model
  precise_.clear();
  precise_layer_ = -1;
}

ObservationRequest LayerScorer::scorer_request(Phase) const {
  ObservationRequest r;
  r.hidden_states = true;
  return r;
}

const std::vector<float>& LayerScorer::projection(int layer, char which) {
  const kernels::ModelWeights* weights = run_info().weights;
  if (!weights || layer < 0 || layer >= static_cast<int>(weights->layers.size()))
    throw Error("policy '" + name() + "' needs the layer's " + which + "_proj, but this run has no model weights");
  std::vector<float>& cached = projections_[{layer, which}];
  if (cached.empty()) {
    const auto& lw = weights->layers[layer];
    const kernels::QuantMatrix& m = which == 'q' ? lw.wq : lw.wk;
    cached.resize(static_cast<std::size_t>(m.rows) * m.cols);
    for (int r = 0; r < m.rows; ++r)
      kernels::dequantize_row(m.type, m.row(r), cached.data() + static_cast<std::size_t>(r) * m.cols, m.cols);
  }
  return cached;
}

std::vector<double> LayerScorer::project(const AttentionObservation& obs, int first, int count, char which) {
  const std::vector<float>& w = projection(obs.layer, which);
  const int n = obs.n_queries();
  const int dim = n > 0 ? static_cast<int>(obs.hidden_states.size() / n) : 0;
  if (obs.hidden_states.empty() || first < 0 || first + count > n || dim == 0)
    throw Error("policy '" + name() + "': layer " + std::to_string(obs.layer) + " has no layer input for rows " +
                std::to_string(first) + ".." + std::to_string(first + count) + " (" + std::to_string(n) + " queries)");
  const int rows = static_cast<int>(w.size() / dim);
  const std::vector<double> x(obs.hidden_states.begin() + static_cast<std::ptrdiff_t>(first) * dim,
                              obs.hidden_states.begin() + static_cast<std::ptrdiff_t>(first + count) * dim);
  const std::vector<double> w64(w.begin(), w.end());
  std::vector<double> out(static_cast<std::size_t>(count) * rows);
  if (count > 0)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, count, rows, dim, 1.0, x.data(), dim, w64.data(), dim, 0.0,
                out.data(), rows);
  return out;
}

std::vector<float> LayerScorer::score(const AttentionObservation& obs, int kv_head, cache::KVCache& cache) {
  if (kv_head == 0 || precise_layer_ != obs.layer) {
    precise_ = score_layer(obs, cache);
    precise_layer_ = obs.layer;
    for (int h = 0; h < cache.n_kv_heads(); ++h)
      if (precise_.at(h).size() != static_cast<std::size_t>(cache.size(obs.layer, h)))
        throw Error("policy '" + name() + "' scored " + std::to_string(precise_[h].size()) + " entries of layer " +
                    std::to_string(obs.layer) + " KV head " + std::to_string(h) + ", which holds " +
                    std::to_string(cache.size(obs.layer, h)));
  }
  const std::vector<double>& s = precise_.at(kv_head);
  return {s.begin(), s.end()};
}

std::vector<double> LayerScorer::rank_scores(int layer, int kv_head, std::span<const float> scores) {
  // The float64 scores rank when they are this step's of this head (the float32 copies carry the edit).
  if (layer == precise_layer_ && kv_head < static_cast<int>(precise_.size())) {
    const std::vector<double>& precise = precise_[kv_head];
    if (precise.size() == scores.size() && std::equal(precise.begin(), precise.end(), scores.begin(),
                                                      [](double d, float f) { return static_cast<float>(d) == f; }))
      return precise;
  }
  return ScoredPolicy::rank_scores(layer, kv_head, scores);
}

void z_normalise(std::vector<double>& x) {
  if (x.empty()) return;
  double mean = 0.0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  double ss = 0.0;
  for (double v : x) ss += (v - mean) * (v - mean);
  const double sd = x.size() > 1 ? std::sqrt(ss / static_cast<double>(x.size() - 1)) : 0.0;
  const double scale = std::max(sd, 1e-6);
  for (double& v : x) v = (v - mean) / scale;
}

std::vector<ParamSpec> layer_scorer_params(std::vector<ParamSpec> own) {
  std::vector<ParamSpec> all =
      scored_policy_params(std::move(own), Protocol{.block = 0, .decode_evict = false, .trim_before_output = false});
  std::erase_if(all,
                [](const ParamSpec& s) {
                  return s.name == "block" || s.name == "decode_evict" || s.name == "trim" || s.name == "prefill_evict" ||
                         s.name == "decode_buffer";
                });
  return all;
}

}  // namespace kvscope::policy
