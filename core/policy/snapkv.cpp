// SnapKV (Li et al., 2024, "SnapKV: LLM Knows What You are Looking for Before Generation", §4, Listing 1):
// the last w prompt queries (the observation window) already attend to what generation will need. Each
// prefix entry is scored by the attention the window gives it, smoothed by 1-D pooling so that
// neighbours of important tokens survive too; the window itself is always kept. Compresses the prompt
// once; decode tokens are appended (the protocol switches block, decode_evict and trim change that). See
// docs/policies.md, "snapkv".
#include "core/policy/snapkv.h"

#include "core/common/error.h"
#include "core/policy/catalog.h"
#include "core/policy/scored_policy.h"
#include "core/policy/selection.h"

namespace kvscope::policy {

namespace {

class SnapKvPolicy final : public ScoredPolicy {
 public:
  SnapKvPolicy(std::string name, const PolicyParams& p)
      : ScoredPolicy(std::move(name), p),
        window_(p.get_int("window")),
        kernel_(p.get_int("kernel")),
        pooling_(parse_pooling(p.get_choice("pooling"))),
        reduce_(parse_group_reduce(p.get_choice("group_reduce"))) {}

 protected:
  // In a decode step (decode_evict) the window is the step's one query, as CAKE's decode eviction reads it.
  ObservationRequest scorer_request(Phase) const override {
    ObservationRequest r;
    r.window = window_;
    r.window_sums = true;
    return r;
  }
  std::vector<float> score(const AttentionObservation& obs, int kv_head, cache::KVCache&) override {
    std::vector<float> s = reduce_group(obs.window_sums, kv_head, obs.n_heads / obs.n_kv_heads, reduce_);
    // Pooling runs over the prefix only, as in the reference code: the window is kept anyway and its
    // own (unpooled) sums stay in the recorded scores.
    const std::size_t prefix = s.size() - std::min<std::size_t>(s.size(), obs.window);
    const std::vector<float> pooled = pool1d(std::span<const float>(s).first(prefix), kernel_, pooling_);
    std::copy(pooled.begin(), pooled.end(), s.begin());
    return s;
  }
  int recent(int) const override { return window_; }
  int reserved() const override { return window_; }

 private:
  int window_, kernel_;
  Pooling pooling_;
  GroupReduce reduce_;
};

}  // namespace

std::vector<ParamSpec> snapkv_params(const std::string& default_allocation) {
  return scored_policy_params(
      {ParamSpec::integer("window", 32, 1, 4096,
                          "SnapKV §4: observation window, the last w prompt queries whose attention scores the prefix; "
                          "the window itself is always kept (paper: 32)"),
       ParamSpec::integer("kernel", 7, 1, 101,
                          "SnapKV Listing 1 (kernel_size): 1-D pooling kernel over the window sums, odd (7 in the "
                          "authors' configurations)"),
       ParamSpec::choice("pooling", "avg", {"avg", "max", "none"},
                         "SnapKV Listing 1: avg_pool1d (zero padding counts) or max_pool1d with padding kernel/2"),
       ParamSpec::choice("group_reduce", "mean", {"mean", "max", "sum"},
                         "GQA: how the window sums of a KV head's query heads are combined (mean, as kvpress)")},
      // §4: the prompt is compressed once, after its last query; decode tokens are appended.
      Protocol{.block = 0, .decode_evict = false, .trim_before_output = false}, default_allocation);
}

std::unique_ptr<Policy> make_snapkv(const std::string& name, const PolicyParams& p) {
  if (p.get_int("kernel") % 2 == 0)
    throw UsageError("policy '" + name + "' parameter 'kernel' = " + std::to_string(p.get_int("kernel")) +
                     " must be odd (pooling pads kernel/2 on each side)");
  return std::make_unique<SnapKvPolicy>(name, p);
}

PolicyInfo snapkv_policy_info() {
  return {"snapkv", "pooled attention from the last prompt queries (observation window); compresses the prompt once",
          "Li et al. 2024, SnapKV: LLM Knows What You are Looking for Before Generation, §4 and Listing 1",
          snapkv_params("uniform"), [](const PolicyParams& p) { return make_snapkv("snapkv", p); }};
}

}  // namespace kvscope::policy
