// CaM: Cache Merging (Zhang et al., ICML 2024), as the KVMerger paper (§2) and the D2O paper (§2, "Token
// Merging") describe it: the base policy evicts as usual, keys are evicted for good, and each evicted
// entry's value is merged into the values of the entries that stay, under a mask drawn from a Bernoulli
// process whose probability follows the attention the entry received. kvscope's reading (docs/policies.md,
// "cam"): an evicted value is added, divided by m, to the m entries that follow it in the cache, with
// probability min(1, a_e / max_{j kept} a_j). The base is StreamingLLM's sinks and window, or H2O.
#include <algorithm>
#include <cmath>
#include <random>

#include "core/policy/catalog.h"
#include "core/policy/scored_policy.h"

namespace kvscope::policy {

namespace {

class CamPolicy final : public ScoredPolicy {
 public:
  explicit CamPolicy(const PolicyParams& p)
      : ScoredPolicy("cam", p),
        h2o_base_(p.get_choice("base") == "h2o"),
        sinks_(p.get_int("sinks")),
        recent_ratio_(p.get_float("recent_ratio")),
        merge_tokens_(p.get_int("merge_tokens")),
        always_(p.get_choice("merge_mask") == "always"),
        seed_(static_cast<unsigned>(p.get_int("seed"))) {}

 protected:
  ObservationRequest scorer_request(Phase) const override {
    ObservationRequest r;
    r.column_sums = true;  // the merge probability reads the attention each entry received this step
    return r;
  }

  std::vector<float> score(const AttentionObservation& obs, int kv_head, cache::KVCache& cache) override {
    // a_j: this step's attention to entry j, summed over the step's queries and the KV head's query heads.
    const int group = obs.n_heads / obs.n_kv_heads;
    std::vector<float>& a = attention_[static_cast<std::size_t>(obs.layer) * run_info().config.n_kv_heads + kv_head];
    a.assign(cache.size(obs.layer, kv_head), 0.0f);
    for (int q = kv_head * group; q < (kv_head + 1) * group; ++q)
      for (std::size_t j = 0; j < a.size(); ++j) a[j] += obs.column_sums[q][j];
    if (!h2o_base_) return {};
    // H2O's running sum (as the h2o policy keeps it), in the cache's per-entry score.
    auto acc = cache.mutable_scores(obs.layer, kv_head);
    for (std::size_t j = 0; j < acc.size(); ++j) acc[j] += a[j];
    return {acc.begin(), acc.end()};
  }
  int sinks(int budget) const override { return h2o_base_ ? 0 : std::min(sinks_, budget); }
  int recent(int budget) const override {
    return h2o_base_ ? static_cast<int>(std::floor(recent_ratio_ * budget)) : budget - std::min(sinks_, budget);
  }
  void on_begin(const RunInfo& info) override {
    attention_.assign(static_cast<std::size_t>(info.config.n_layers) * info.config.n_kv_heads, {});
    merged_ = masked_ = 0;
  }

  // The merge: for each evicted entry e in cache order, a mask M_e ~ Bernoulli(p_e), p_e = min(1, a_e /
  // max_{j kept} a_j), and V[t] += M_e / m * V[e] for the m entries t that follow e (kept or evicted later
  // in the same edit, which then carry it on, as a token-by-token run would).
  void complete_edit(cache::HeadEdit& edit, const cache::KVCache& cache) override {
    const std::vector<float>& a =
        attention_[static_cast<std::size_t>(edit.layer) * run_info().config.n_kv_heads + edit.kv_head];
    const int n = cache.size(edit.layer, edit.kv_head);
    if (static_cast<int>(a.size()) != n) return;  // no observation this step: nothing to weigh the merge by
    std::vector<char> kept(n, 0);
    float top = 0.0f;
    for (int32_t k : edit.keep) {
      kept[k] = 1;
      top = std::max(top, a[k]);
    }
    const auto positions = cache.positions(edit.layer, edit.kv_head);
    for (int e = 0; e < n; ++e) {
      if (kept[e]) continue;
      const double p = top > 0.0f ? std::min(1.0, static_cast<double>(a[e]) / top) : 1.0;
      if (!always_ && draw(edit.layer, edit.kv_head, positions[e]) >= p) {
        ++masked_;
        continue;
      }
      cache::ValueMerge merge;
      merge.source = e;
      merge.weight = 1.0f / static_cast<float>(merge_tokens_);
      for (int t = e + 1; t < n && static_cast<int>(merge.targets.size()) < merge_tokens_; ++t)
        merge.targets.push_back(t);
      if (merge.targets.empty()) continue;
      edit.value_merges.push_back(std::move(merge));
      ++merged_;
    }
    diagnostics_.set_setting("value_merges", std::to_string(merged_));
    diagnostics_.set_setting("masked_evictions", std::to_string(masked_));
  }

 private:
  // A uniform draw in [0, 1) that depends only on the seed and the entry, so a run is reproducible and a
  // replayed prefill draws what a fresh one does.
  double draw(int layer, int kv_head, int32_t position) const {
    std::seed_seq seq{seed_, static_cast<unsigned>(layer), static_cast<unsigned>(kv_head),
                      static_cast<unsigned>(position)};
    std::mt19937 rng(seq);
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  }

  bool h2o_base_;
  int sinks_;
  double recent_ratio_;
  int merge_tokens_;
  bool always_;
  unsigned seed_;
  std::vector<std::vector<float>> attention_;  // [layer * kv_heads + kv_head]: this step's a_j
  long merged_ = 0, masked_ = 0;
};

}  // namespace

PolicyInfo cam_policy_info() {
  return {"cam",
          "the base evicts (sinks + window, or H2O); evicted values are added into the next m entries' values under a "
          "Bernoulli mask",
          "Zhang et al. 2024, CaM: Cache Merging for Memory-efficient LLMs Inference (ICML), as described by KVMerger "
          "§2 and D2O §2",
          scored_policy_params(
              {ParamSpec::choice("base", "local", {"local", "h2o"},
                                 "the eviction CaM merges from: StreamingLLM's sinks and recent window, or H2O's "
                                 "heavy hitters plus recent tokens"),
               ParamSpec::integer("sinks", 4, 0, 1024, "base=local: initial tokens kept (StreamingLLM §3.2: 4)"),
               ParamSpec::real("recent_ratio", 0.5, 0.0, 1.0, "base=h2o: share of the budget kept for recent tokens"),
               ParamSpec::integer("merge_tokens", 4, 1, 1024,
                                  "m: entries after an evicted one whose values each receive 1/m of its value "
                                  "(kvscope's choice; the descriptions give no number)"),
               ParamSpec::choice("merge_mask", "bernoulli", {"bernoulli", "always"},
                                 "merge mask: Bernoulli(min(1, a_e / max kept a)) (D2O §2: 'a bernoulli process'), or "
                                 "every evicted value merges"),
               ParamSpec::integer("seed", 0, 0, 1 << 30, "seed of the Bernoulli draws (one per evicted entry)")},
              // Like its StreamingLLM and H2O bases: one prompt pass, then every decode step evicts.
              Protocol{.block = 0, .decode_evict = true, .trim_before_output = false}),
          [](const PolicyParams& p) { return std::make_unique<CamPolicy>(p); }};
}

}  // namespace kvscope::policy
