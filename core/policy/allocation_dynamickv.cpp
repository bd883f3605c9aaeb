// DynamicKV scoring (eq. 1) and layer allocation by a global top-k over the layers' scores (eqs. 5-8).
#include "core/policy/allocation_dynamickv.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/common/error.h"
#include "core/policy/allocation_catalog.h"

namespace kvscope::policy::dynamickv {

std::vector<ParamSpec> score_params() {
  return {
      ParamSpec::integer("window", 8, 0, 1 << 16, "ws, the last prompt tokens whose attention scores the rest (eq. 1) [code: 8]"),
      ParamSpec::integer("kernel", 7, 1, 1023, "odd 1-D pooling kernel over the scores (eq. 1) [code: 7]"),
      ParamSpec::choice("pooling", "avg", {"avg", "max", "none"}, "pooling of eq. 1 [code: avg for Llama-3, max for Mistral/Qwen2]"),
      ParamSpec::choice("group_reduce", "mean", {"mean", "max", "sum"},
                        "query heads of a KV head combined before pooling (spec B6-5, kv_head mode)"),
      ParamSpec::real("r_max", 10.0, 1.0, 1e4, "buffer bs = r_max * (wt - ws) per layer (eq. 2) [code: 10]"),
      ParamSpec::choice("arithmetic", "paper", {"paper", "code"},
                        "eqs. 6-7: the paper's C = count / l' normalised by max C, or the official code's integer "
                        "count // l' normalised by sum C (coarser rounding; small counts become 0)"),
  };
}

ScoreSettings score_settings(const PolicyParams& params) {
  ScoreSettings s;
  s.window = params.get_int("window");
  s.kernel = params.get_int("kernel");
  if (s.kernel % 2 == 0) throw UsageError("dynamickv kernel=" + std::to_string(s.kernel) + ": expected an odd pooling kernel");
  s.pooling = parse_pooling(params.get_choice("pooling"));
  s.reduce = parse_group_reduce(params.get_choice("group_reduce"));
  s.r_max = params.get_float("r_max");
  s.code_arithmetic = params.get_choice("arithmetic") == "code";
  return s;
}

std::vector<float> window_scores(const observation::AttentionObservation& obs, int kv_head, int window, int kernel,
                                 Pooling pooling, GroupReduce reduce) {
  const int n_keys = obs.n_keys[kv_head];
  const int rows = std::min(window, obs.window);
  const int scored = std::max(0, n_keys - window);
  const int group = obs.n_heads / obs.n_kv_heads;
  // The paper averages the window (eq. 1); the code sums. Same ranking, and the same window length in
  // every layer keeps the cross-layer top-k comparable (spec B6-1): sum.
  std::vector<std::vector<float>> per_head(obs.n_heads);
  for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
    std::vector<float>& sums = per_head[h];
    sums.assign(scored, 0.0f);
    const std::vector<float>& window_rows = obs.window_rows[h];
    for (int r = obs.window - rows; r < obs.window; ++r) {
      const float* row = window_rows.data() + static_cast<std::size_t>(r) * n_keys;
      for (int j = 0; j < scored; ++j) sums[j] += row[j];
    }
  }
  const std::vector<float> combined = reduce_group(per_head, kv_head, group, reduce);
  return pool1d(combined, kernel, pooling);
}

std::vector<long> winner_counts(const std::vector<std::vector<std::vector<float>>>& scores, long k) {
  struct Item {
    float score;
    int layer;
    long order;  // position in layer, head, key order: the tie-break
  };
  std::vector<Item> items;
  long order = 0;
  for (int l = 0; l < static_cast<int>(scores.size()); ++l)
    for (const auto& head : scores[l])
      for (float s : head) items.push_back({s, l, order++});
  std::vector<long> counts(scores.size(), 0);
  k = std::clamp<long>(k, 0, static_cast<long>(items.size()));
  auto before = [](const Item& a, const Item& b) { return a.score > b.score || (a.score == b.score && a.order < b.order); };
  std::nth_element(items.begin(), items.begin() + k, items.end(), before);
  for (long i = 0; i < k; ++i) ++counts[items[i].layer];
  return counts;
}

std::vector<int> normalised_budgets(const std::vector<long>& counts, int buffer_size, long total, bool code_arithmetic) {
  const int layers = static_cast<int>(counts.size());
  std::vector<int> budgets(layers, 0);
  if (layers == 0) return budgets;
  // Eq. 6: C = Norm(Count_Elements(I) / l'). The paper's real division by l' cancels in the norm; the
  // code's integer division does not, and a layer with fewer than l' winners gets nothing.
  std::vector<long> c(counts);
  if (code_arithmetic)
    for (long& v : c) v /= layers;
  const long sum_c = std::accumulate(c.begin(), c.end(), 0L);
  const long max_c = *std::max_element(c.begin(), c.end());
  // Eq. 7: Z_i = floor(bs * C_i / max C): the busiest layer gets the whole buffer. The code divides by
  // sum C instead, which makes every Z_i about L times smaller and so its floors about L times coarser
  // once eq. 8 scales them back up.
  const long norm = code_arithmetic ? sum_c : max_c;
  if (norm > 0) {
    for (int i = 0; i < layers; ++i) budgets[i] = static_cast<int>(std::floor(static_cast<double>(buffer_size) * c[i] / norm));
    const long sum_z = std::accumulate(budgets.begin(), budgets.end(), 0L);
    if (sum_z > 0) {
      // Eq. 8: r = sum Z / ((wt - ws) * L); Z_i = floor(Z_i / r).
      const double r = static_cast<double>(sum_z) / static_cast<double>(total);
      for (int& z : budgets) z = static_cast<int>(std::floor(z / r));
    }
  }
  // [code] The last layer seen takes what flooring lost, so the total is exact.
  budgets.back() += static_cast<int>(total - std::accumulate(budgets.begin(), budgets.end(), 0L));
  return budgets;
}

observation::ObservationRequest DynamicKVAllocation::request(int) const {
  observation::ObservationRequest r;
  r.window = std::max(settings_.window, 1);
  r.window_rows = true;
  return r;
}

void DynamicKVAllocation::observe(const observation::AttentionObservation& obs) {
  if (obs.layer == 0) scores_.clear();  // a new prefill pass supersedes the last
  if (obs.layer != static_cast<int>(scores_.size()))
    throw Error("dynamickv allocation: observed layer " + std::to_string(obs.layer) + ", expected layer " +
                std::to_string(scores_.size()) + " (layers must be observed in order, once per prefill)");
  std::vector<std::vector<float>> layer(obs.n_kv_heads);
  for (int g = 0; g < obs.n_kv_heads; ++g)
    layer[g] = window_scores(obs, g, settings_.window, settings_.kernel, settings_.pooling, settings_.reduce);
  scores_.push_back(std::move(layer));
}

std::vector<int> DynamicKVAllocation::budgets(int n_layers, int average_budget, int seq_len) {
  if (static_cast<int>(scores_.size()) != n_layers)
    throw Error("dynamickv allocation: " + std::to_string(scores_.size()) + " layers observed, expected " +
                std::to_string(n_layers));
  counts_.assign(n_layers, 0);
  allocation_.assign(n_layers, 0);
  // Spec B6-7: a prompt that fits the budget is not compressed.
  if (seq_len <= average_budget) return std::vector<int>(n_layers, seq_len);
  // A budget no larger than the window keeps the window alone (base 0: the top-k selects nothing).
  const int window = std::min(settings_.window, average_budget);
  const int base = average_budget - window;
  const int scored = seq_len - window;
  const int buffer = std::min(static_cast<int>(settings_.r_max * base), scored);
  const int kv_heads = scores_.empty() ? 0 : static_cast<int>(scores_[0].size());
  counts_ = winner_counts(scores_, static_cast<long>(base) * kv_heads * n_layers);
  allocation_ = normalised_budgets(counts_, buffer, static_cast<long>(base) * n_layers, settings_.code_arithmetic);
  std::vector<int> budgets(allocation_);
  // No buffer to shrink here, but no layer can keep more than its buffer (eq. 2) or the prompt.
  for (int& b : budgets) b = std::clamp(b, 0, buffer) + window;
  return budgets;
}

void DynamicKVAllocation::publish(Diagnostics& out) const {
  const int L = static_cast<int>(counts_.size());
  out.set("winner_counts", Series{std::vector<double>(counts_.begin(), counts_.end()), {L}, {"layer"},
                                  "DynamicKV eq. 5: winners of the global top-(wt-ws)*H*L per layer"});
  out.set("allocation", Series{std::vector<double>(allocation_.begin(), allocation_.end()), {L}, {"layer"},
                               "DynamicKV eqs. 6-8: BL_l, tokens besides the window, summing to (wt-ws)*L"});
}

}  // namespace kvscope::policy::dynamickv

namespace kvscope::policy {

AllocationInfo dynamickv_allocation_info() {
  return {"dynamickv",
          "one global top-k over every layer's pooled window attention; layers get budgets by their share of winners",
          "Zhou et al., DynamicKV (arXiv 2412.14838), eqs. 1 and 5-8 (one shot, after all layers)",
          dynamickv::score_params(),
          [](const PolicyParams& p) { return std::make_unique<dynamickv::DynamicKVAllocation>(dynamickv::score_settings(p)); }};
}

}  // namespace kvscope::policy
