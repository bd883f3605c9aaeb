// SnapKV (Li et al., 2024, "SnapKV: LLM Knows What You are Looking for Before Generation", §4, Listing 1):
// the last w prompt queries (the observation window) already attend to what generation will need. Each
// prefix entry is scored by the attention the window gives it, smoothed by 1-D pooling so that
// neighbours of important tokens survive too; the window itself is always kept. Compresses the prompt
// once; decode tokens are appended (the protocol switches block, decode_evict and trim change that). See
// docs/policies.md, "snapkv".
#include "core/policy/snapkv.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/common/error.h"
#include "core/policy/catalog.h"
#include "core/policy/rope_rotation.h"
#include "core/policy/scored_policy.h"
#include "core/policy/selection.h"

namespace kvscope::policy {

namespace {

// kvpress SnapKVPress under DecodingPress (decode_interval > 1): no attention weights reach the press (sdpa), so it
// recomputes its window's attention from the buffered steps (SnapKVPress.compute_window_attention): the last r of
// the buffered rows' queries before RoPE, every one rotated with the evicting step's own angles (the one-token
// forward's position_embeddings), against all `n` keys of the cache, query i seeing keys 0 .. n - r + i (the rows
// are the last r entries: nothing left between two evictions). Per query head of `kv_head`'s group, the sum over
// the r queries of the softmax rows, computed in float64 ([group][n]).
std::vector<std::vector<float>> buffered_window_sums(const AttentionObservation& obs, int kv_head, int r,
                                                     const RopeRotation& rope, const cache::KVCache& cache) {
  const int n = cache.size(obs.layer, kv_head), d = cache.head_dim(), group = obs.n_heads / obs.n_kv_heads;
  const int rows = obs.n_queries();
  if (static_cast<long>(obs.queries_pre_rope.size()) != static_cast<long>(rows) * obs.n_heads * d)
    throw Error("snapkv: layer " + std::to_string(obs.layer) + " buffered " + std::to_string(rows) +
                " decode rows but " + std::to_string(obs.queries_pre_rope.size()) + " query values (want " +
                std::to_string(static_cast<long>(rows) * obs.n_heads * d) + ")");
  if (r > rows || r > n) throw Error("snapkv: a window of " + std::to_string(r) + " buffered queries needs as many rows");
  std::vector<float> cos_sin(rope.rope_dim), q(d);
  rope.angles(obs.query_positions.back(), cos_sin.data());
  const auto keys = cache.keys(obs.layer, kv_head);  // [n][d], after RoPE at their own positions
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<std::vector<float>> out(group, std::vector<float>(n, 0.0f));
  std::vector<double> logits(n), sums(n);
  for (int g = 0; g < group; ++g) {
    const int head = kv_head * group + g;
    std::fill(sums.begin(), sums.end(), 0.0);
    for (int i = 0; i < r; ++i) {
      const float* pre = obs.queries_pre_rope.data() +
                         (static_cast<std::size_t>(rows - r + i) * obs.n_heads + head) * static_cast<std::size_t>(d);
      std::copy(pre, pre + d, q.begin());
      rope.rotate(q.data(), cos_sin.data());
      const int visible = n - r + i + 1;
      double mx = -INFINITY;
      for (int j = 0; j < visible; ++j) {
        double dot = 0.0;
        for (int e = 0; e < d; ++e) dot += static_cast<double>(q[e]) * keys[static_cast<std::size_t>(j) * d + e];
        logits[j] = dot * scale;
        mx = std::max(mx, logits[j]);
      }
      double total = 0.0;
      for (int j = 0; j < visible; ++j) total += logits[j] = std::exp(logits[j] - mx);
      for (int j = 0; j < visible; ++j) sums[j] += logits[j] / total;
    }
    std::transform(sums.begin(), sums.end(), out[g].begin(), [](double v) { return static_cast<float>(v); });
  }
  return out;
}

class SnapKvPolicy final : public ScoredPolicy {
 public:
  SnapKvPolicy(std::string name, const PolicyParams& p)
      : ScoredPolicy(std::move(name), p),
        window_(p.get_int("window")),
        kernel_(p.get_int("kernel")),
        pooling_(parse_pooling(p.get_choice("pooling"))),
        reduce_(parse_group_reduce(p.get_choice("group_reduce"))) {}

 protected:
  // In a decode step (decode_evict) the window is the step's one query, as CAKE's decode eviction reads it; with
  // decode_interval > 1 it is the last `window` of the buffered steps' queries (kvpress DecodingPress, above).
  ObservationRequest scorer_request(Phase phase) const override {
    ObservationRequest r;
    if (phase == Phase::Decode && buffered_decode()) {
      r.queries_pre_rope = true;
      return r;
    }
    r.window = window_;
    r.window_sums = true;
    return r;
  }
  void on_begin(const RunInfo& info) override {
    rope_ = RopeRotation(info.config);
    kvpress_order_.assign(info.config.n_layers, std::vector<std::vector<int32_t>>(info.config.n_kv_heads));
  }
  std::vector<float> score(const AttentionObservation& obs, int kv_head, cache::KVCache& cache) override {
    if (obs.phase == Phase::Decode && buffered_decode()) return score_buffered(obs, kv_head, cache);
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
  bool buffered_decode() const { return protocol().decode_evict && protocol().decode_interval > 1; }

  // kvpress DecodingPress(SnapKVPress) at an evicting decode step (decode_interval > 1): the window's attention from
  // the buffered queries (buffered_window_sums), pooled in the order kvpress's cache holds the entries. Its
  // ScorerPress gathers the kept entries in torch.topk's order, by decreasing score, and appends decode tokens after
  // them, so from its second compression on the pooling's neighbours are neighbours in the last compression's
  // ranking, not in position: kvscope keeps that order per (layer, KV head) to pool as kvpress does.
  std::vector<float> score_buffered(const AttentionObservation& obs, int kv_head, const cache::KVCache& cache) {
    const int group = obs.n_heads / obs.n_kv_heads, n = cache.size(obs.layer, kv_head);
    // kvpress asserts that its buffer holds more rows than the window; with fewer, every buffered row is a query
    const int r = std::min({window_, obs.n_queries(), n});
    std::vector<std::vector<float>> per_head(obs.n_heads);
    auto sums = buffered_window_sums(obs, kv_head, r, rope_, cache);
    std::move(sums.begin(), sums.end(), per_head.begin() + static_cast<std::ptrdiff_t>(kv_head) * group);
    std::vector<float> s = reduce_group(per_head, kv_head, group, reduce_);
    // kvpress's cache order as cache indices: the last reordering compression's ranking of the entries still here,
    // then the others (decode tokens since, or the whole cache before any) in position order
    const auto positions = cache.positions(obs.layer, kv_head);
    std::vector<int32_t>& ranked = kvpress_order_[obs.layer][kv_head];
    std::unordered_map<int32_t, int> index_of;
    for (int i = 0; i < n; ++i) index_of.emplace(positions[i], i);
    std::vector<int> order;
    std::vector<char> placed(n, 0);
    for (const int32_t p : ranked)
      if (auto it = index_of.find(p); it != index_of.end()) order.push_back(it->second), placed[it->second] = 1;
    for (int i = 0; i < n; ++i)
      if (!placed[i]) order.push_back(i);
    // pooled over the prefix in that order; the window (its last w entries, the newest) is kept anyway
    const int prefix = n - std::min(n, window_);
    std::vector<float> in_order(prefix);
    for (int k = 0; k < prefix; ++k) in_order[k] = s[order[k]];
    const std::vector<float> pooled = pool1d(in_order, kernel_, pooling_);
    for (int k = 0; k < prefix; ++k) s[order[k]] = pooled[k];
    // A compression that removes entries reorders kvpress's cache: the window first (its exact ties at max + 1, which
    // torch.topk returns newest first in most measured cases), then the prefix by decreasing score (ties: kvpress's
    // order). One that keeps everything (the cache within the budget) leaves the order as it is.
    if (n > layer_budgets().at(obs.layer)) {
      std::vector<int> by_score(order.begin(), order.begin() + prefix);
      std::stable_sort(by_score.begin(), by_score.end(), [&](int a, int b) { return s[a] > s[b]; });
      ranked.clear();
      for (int k = n - 1; k >= prefix; --k) ranked.push_back(positions[order[k]]);
      for (const int i : by_score) ranked.push_back(positions[i]);
    }
    return s;
  }

  RopeRotation rope_;
  std::vector<std::vector<std::vector<int32_t>>> kvpress_order_;  // [layer][kv_head]: positions, see score_buffered
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
