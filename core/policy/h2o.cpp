// H2O (Zhang et al., 2023, "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language
// Models", §4 / Algorithm 1): a token's importance is the attention it has received so far, summed over
// every query; keep the heaviest hitters plus the most recent tokens. See docs/policies.md, "h2o".
#include <cmath>

#include "core/policy/catalog.h"
#include "core/policy/scored_policy.h"

namespace kvscope::policy {

namespace {

class H2oPolicy final : public ScoredPolicy {
 public:
  explicit H2oPolicy(const PolicyParams& p) : ScoredPolicy("h2o", p), recent_ratio_(p.get_float("recent_ratio")) {}

 protected:
  ObservationRequest scorer_request(Phase) const override {
    ObservationRequest r;
    r.column_sums = true;
    return r;
  }
  // The running sum lives in the cache's per-entry score so that it follows entries through evictions
  // (and adds up under merges). GQA: the KV head's entries get the attention of all its query heads.
  std::vector<float> score(const AttentionObservation& obs, int kv_head, cache::KVCache& cache) override {
    auto acc = cache.mutable_scores(obs.layer, kv_head);
    const int group = obs.n_heads / obs.n_kv_heads;
    for (int q = kv_head * group; q < (kv_head + 1) * group; ++q)
      for (std::size_t j = 0; j < acc.size(); ++j) acc[j] += obs.column_sums[q][j];
    return {acc.begin(), acc.end()};
  }
  int recent(int budget) const override { return static_cast<int>(std::floor(recent_ratio_ * budget)); }

 private:
  double recent_ratio_;
};

}  // namespace

PolicyInfo h2o_policy_info() {
  return {"h2o", "heavy hitters (largest attention received so far, summed over all queries) plus recent tokens",
          "Zhang et al. 2023, H2O: Heavy-Hitter Oracle (NeurIPS), §4 and Algorithm 1",
          scored_policy_params({ParamSpec::real("recent_ratio", 0.5, 0.0, 1.0,
                                                "share of the budget kept for the most recent tokens, floor(ratio x "
                                                "budget); the rest are heavy hitters (Algorithm 1; the paper's "
                                                "default splits the budget evenly)")},
                               // Algorithm 1 evicts at every decode step; block 0: one prompt pass, then evict.
                               Protocol{.block = 0, .decode_evict = true, .trim_before_output = false}),
          [](const PolicyParams& p) { return std::make_unique<H2oPolicy>(p); }};
}

}  // namespace kvscope::policy
