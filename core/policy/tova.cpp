// TOVA (Oren et al., 2024, "Transformers are Multi-State RNNs", §3): keep the tokens the current query
// attends to most. After the prompt, its last query ranks the prompt; then each decode step evicts the
// entry with the lowest attention from the new token. See docs/policies.md, "tova".
#include "core/common/error.h"
#include "core/policy/catalog.h"
#include "core/policy/scored_policy.h"
#include "core/policy/selection.h"

namespace kvscope::policy {

namespace {

class TovaPolicy final : public ScoredPolicy {
 public:
  explicit TovaPolicy(const PolicyParams& p)
      : ScoredPolicy("tova", p), layer_shared_(p.get_choice("heads") == "layer") {}

 protected:
  ObservationRequest scorer_request(Phase) const override {
    ObservationRequest r;
    r.last_row = true;
    return r;
  }
  // GQA: by default the mean over the KV head's own query heads, since our cache is per KV head. The paper
  // averages all heads of a layer and keeps one token set per layer (heads=layer): every KV head then gets
  // the same ranking, so their entries stay aligned.
  std::vector<float> score(const AttentionObservation& obs, int kv_head, cache::KVCache&) override {
    if (!layer_shared_) return reduce_group(obs.last_row, kv_head, obs.n_heads / obs.n_kv_heads, GroupReduce::Mean);
    for (int h = 1; h < obs.n_kv_heads; ++h)
      if (obs.n_keys[h] != obs.n_keys[0])
        throw Error("tova heads=layer: layer " + std::to_string(obs.layer) + " kv heads hold " +
                    std::to_string(obs.n_keys[0]) + " and " + std::to_string(obs.n_keys[h]) +
                    " entries, but a shared selection needs aligned heads");
    return reduce_group(obs.last_row, 0, obs.n_heads, GroupReduce::Mean);
  }

 private:
  bool layer_shared_;
};

}  // namespace

PolicyInfo tova_policy_info() {
  return {"tova", "keep the entries the current (last) query attends to most; one eviction per decode step",
          "Oren et al. 2024, Transformers are Multi-State RNNs (TOVA), §3",
          scored_policy_params(
              {ParamSpec::choice("heads", "kv", {"kv", "layer"},
                                 "whose attention is averaged: the KV head's query heads (kv, per-KV-head "
                                 "eviction) or every head of the layer, one token set per layer as in the paper "
                                 "(layer)")},
              // §3: one eviction per decode step, after the step's output.
              Protocol{.block = 0, .decode_evict = true, .trim_before_output = false}),
          [](const PolicyParams& p) { return std::make_unique<TovaPolicy>(p); }};
}

}  // namespace kvscope::policy
