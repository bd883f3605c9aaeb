#pragma once
// The shared body of the built-in kvpress ports that score a whole layer at once from what the layer computed
// before attention (its normed input, projected again by q_proj or k_proj) and the cache, in float64 as kvpress's
// presses and their Python twins under examples/policies do: a subclass returns one float64 row per KV head, and
// the float64 scores rank (the float32 copies are what the trace records), so the built-in keeps what its Python
// twin keeps. Helpers for the algebra the ports share (projection, z-score) live here too.
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/policy/rope_rotation.h"
#include "core/policy/scored_policy.h"

namespace kvscope::policy {

class LayerScorer : public ScoredPolicy {
 public:
  LayerScorer(std::string name, const PolicyParams& params);

 protected:
  // [n_kv_heads][entries of that head]: the layer's scores, higher kept first.
  virtual std::vector<std::vector<double>> score_layer(const AttentionObservation& obs,
                                                       const cache::KVCache& cache) = 0;

  // The layer's q_proj ('q', (n_heads x head_dim) x dim) or k_proj ('k') dequantized to float32, row-major in the
  // model file's row order; dequantized once per run.
  const std::vector<float>& projection(int layer, char which);
  const RopeRotation& rope() const { return rope_; }
  // Rows [first, first + count) of the step's normed layer input (obs.hidden_states) times the layer's projection
  // `which`, in float64: (count, projection rows), row-major.
  std::vector<double> project(const AttentionObservation& obs, int first, int count, char which);

  ObservationRequest scorer_request(Phase phase) const override;
  std::vector<float> score(const AttentionObservation& obs, int kv_head, cache::KVCache& cache) final;
  std::vector<double> rank_scores(int layer, int kv_head, std::span<const float> scores) final;
  void on_begin(const RunInfo& info) override;

 private:
  RopeRotation rope_;
  std::map<std::pair<int, char>, std::vector<float>> projections_;
  std::vector<std::vector<double>> precise_;  // [kv_head]: this layer's float64 scores
  int precise_layer_ = -1;
};

// (x - mean) / max(std, 1e-6) over all of `x`, with the unbiased standard deviation (kvpress's normalisation
// over a layer's heads and tokens).
void z_normalise(std::vector<double>& x);

// The scorer's parameters without the protocol switches: the ports score the prompt once, after a one-pass
// prefill, and append decode tokens, as kvpress's presses do (a fixed protocol; block= and the others are refused).
std::vector<ParamSpec> layer_scorer_params(std::vector<ParamSpec> own);

}  // namespace kvscope::policy
