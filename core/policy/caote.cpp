// CAOTE (Goel et al.): evict the entries whose removal changes the attention output least. A base
// policy's retention scores (H2O, TOVA, SnapKV) are normalised into a distribution alpha, and each
// entry's eviction error c_j = alpha_j / (1 - alpha_j) * ||X - v_j|| is known in closed form (Eq. 8/19),
// with X the alpha-weighted mean of the values (Eq. 10), or their plain mean for FastCAOTE (Eq. 23).
// The prompt streams in blocks of m tokens; whenever a (layer, KV head) holds more than b entries,
// the lowest-error entries go (m per block, one per decode step; §2, Eq. 5-6), before the step's attention
// output is computed (Eq. 7; the engine's trim-before-output hook). `trim=after_output` keeps the older
// order, and `score=base` evicts by the base score alone under the same protocol: the "base" of the
// paper's "base vs base + CAOTE" comparisons.
// See docs/policies.md, "caote".
#include <algorithm>
#include <cmath>
#include <deque>

#include "core/common/error.h"
#include "core/policy/catalog.h"
#include "core/policy/protocol.h"
#include "core/policy/selection.h"
#include "kernels/common/merge_math.h"

namespace kvscope::policy {

namespace {

enum class Base { H2O, Tova, SnapKV };

Base parse_base(const std::string& name) {
  if (name == "h2o") return Base::H2O;
  if (name == "tova") return Base::Tova;
  return Base::SnapKV;
}

struct CaoteConfig {
  Base base = Base::H2O;
  bool fast = false;         // FastCAOTE, Eq. 23
  bool exact_concat = true;  // GQA: per-query-head errors combined as the norm of the concatenated output
  bool base_only = false;    // score=base: the base score decides, CAOTE's term is off
  Protocol protocol;
  int window = 32;  // SnapKV observation window (protected)
  int kernel = 5;
  Pooling pooling = Pooling::Avg;
  double h2o_recent_ratio = 0.5;  // H2O base: share of b kept for the newest entries
  int sinks = 0;
  int recent = 0;
};

// Squared eviction error of every entry for one query head (Eq. 8 and its generalisation Eq. 20-21),
// added into `sq`. alpha sums to 1 over the n entries; values is [n][d].
void add_squared_errors(const std::vector<double>& alpha, const float* values, int n, int d, bool fast,
                        std::vector<double>& sq) {
  std::vector<double> x(d, 0.0);
  if (fast) {
    // Eq. 23: the pre-eviction output is replaced by the plain mean of the values.
    for (int i = 0; i < n; ++i)
      for (int t = 0; t < d; ++t) x[t] += values[static_cast<std::size_t>(i) * d + t];
    for (int t = 0; t < d; ++t) x[t] /= n;
  } else {
    // Eq. 10: X = V alpha^T.
    for (int i = 0; i < n; ++i)
      for (int t = 0; t < d; ++t) x[t] += alpha[i] * values[static_cast<std::size_t>(i) * d + t];
  }
  for (int j = 0; j < n; ++j) {
    double norm2 = 0.0;
    for (int t = 0; t < d; ++t) {
      const double diff = x[t] - values[static_cast<std::size_t>(j) * d + t];
      norm2 += diff * diff;
    }
    sq[j] += kernels::caote_squared_error(alpha[j], norm2);  // Eq. 19
  }
}

// Eq. 22: divide by the sum so the scores form the distribution Theorem 3.1 needs (all base scores
// here are >= 0). A degenerate all-zero score vector becomes uniform rather than 0/0.
std::vector<double> normalised(const std::vector<double>& scores) {
  double sum = 0.0;
  for (double s : scores) sum += s;
  std::vector<double> alpha(scores.size());
  for (std::size_t i = 0; i < scores.size(); ++i)
    alpha[i] = sum > 0.0 ? scores[i] / sum : 1.0 / static_cast<double>(scores.size());
  return alpha;
}

class CaotePolicy final : public Policy {
 public:
  explicit CaotePolicy(const CaoteConfig& config) : config_(config) {}

  std::string name() const override { return "caote"; }

  ObservationRequest request(int, Phase) const override {
    ObservationRequest r;
    switch (config_.base) {
      case Base::H2O:
        r.column_sums = true;
        break;
      case Base::Tova:
        r.last_row = true;
        break;
      case Base::SnapKV:
        r.window = config_.window;
        r.window_rows = true;
        break;
    }
    return r;
  }

  int prefill_block_size() const override { return config_.protocol.block; }
  bool trims_before_output(Phase phase) const override { return config_.protocol.trims_before_output(phase); }

  void begin(const RunInfo& info) override {
    layers_ = info.config.n_layers;
    heads_ = info.config.n_heads;
    kv_heads_ = info.config.n_kv_heads;
    group_ = info.config.group_size();
    budget_ = info.budget;
    prompt_ = info.prompt_length;
    if (budget_ < 1) throw UsageError("caote needs a budget of at least 1 token per layer and KV head");
    accumulated_.assign(static_cast<std::size_t>(layers_) * heads_, {});
    window_rows_.assign(static_cast<std::size_t>(layers_) * heads_, {});
    seq_len_ = 0;
    diagnostics_ = Diagnostics();
    publish_protocol(config_.protocol, budget_, "policy 'caote'", diagnostics_);
  }

  cache::CacheEdit after_layer(const AttentionObservation& obs, cache::KVCache& cache) override {
    cache::CacheEdit edit;
    const int l = obs.layer;
    const bool prefill_done =
        obs.phase == Phase::Decode || obs.query_positions.empty() || obs.query_positions.back() + 1 >= prompt_;
    if (!config_.protocol.evicts_in(obs.phase, prefill_done, obs.step)) return edit;
    for (int g = 0; g < kv_heads_; ++g) {
      const int n = obs.n_keys[g];
      std::vector<std::vector<double>> base(group_);
      for (int k = 0; k < group_; ++k) base[k] = observe_and_score(obs, g * group_ + k, n);
      if (n <= budget_) continue;

      // Protected entries are kept and count against b (digest §1.6). Each base keeps what its own policy
      // protects: H2O its recent tokens (otherwise a new token, whose accumulated attention is one row's
      // worth, would be evicted in the step it arrives), SnapKV its window. They still take part in alpha
      // and X, which the paper defines over every entry.
      int recent = config_.recent;
      if (config_.base == Base::H2O) recent = std::max(recent, static_cast<int>(config_.h2o_recent_ratio * budget_));
      if (config_.base == Base::SnapKV) recent = std::max(recent, config_.window);
      recent = std::min(recent, budget_);
      const int sinks = std::min(config_.sinks, budget_ - recent);

      const int d = cache.head_dim();
      const float* values = cache.values(l, g).data();
      std::vector<double> sq(n, 0.0);
      std::vector<float> base_mean(n, 0.0f);
      for (int k = 0; k < group_; ++k)
        for (int j = 0; j < n; ++j) base_mean[j] += static_cast<float>(base[k][j] / group_);
      if (config_.exact_concat) {
        // Evicting entry j of KV head g perturbs every query head of the group; the error of their
        // concatenated output is the root of the summed squared per-head errors (App. B.2, case 2).
        for (int k = 0; k < group_; ++k) add_squared_errors(normalised(base[k]), values, n, d, config_.fast, sq);
      } else {
        std::vector<double> mean(base_mean.begin(), base_mean.end());
        add_squared_errors(normalised(mean), values, n, d, config_.fast, sq);
      }
      std::vector<float> caote(n);
      for (int j = 0; j < n; ++j) caote[j] = static_cast<float>(std::sqrt(sq[j]));

      const std::vector<int32_t> base_keep = keep_top_scores(base_mean, budget_, sinks, recent);
      std::vector<int32_t> keep = config_.base_only ? base_keep : keep_top_scores(caote, budget_, sinks, recent);
      record_decision(obs, g, n, keep, base_keep);
      compact_state(l, g, keep);
      cache::HeadEdit head = keep_edit(l, g, std::move(keep), std::move(caote));
      head.secondary_scores = std::move(base_mean);
      edit.heads.push_back(std::move(head));
    }
    return edit;
  }

  cache::CacheEdit after_step(const StepInfo& step, cache::KVCache&) override {
    seq_len_ = step.seq_len;
    return {};
  }

  int expected_length(int, int, const StepInfo& step) const override {
    if (step.phase == Phase::Decode && !config_.protocol.decode_evict)
      return std::min(prompt_, budget_) + (step.seq_len - prompt_);
    return std::min(step.seq_len, budget_);
  }

  std::vector<int> layer_budgets() const override { return std::vector<int>(layers_, std::min(seq_len_, budget_)); }

 private:
  std::size_t slot(int layer, int head) const { return static_cast<std::size_t>(layer) * heads_ + head; }

  // Folds this step's attention into the base policy's state for query head h and returns its raw
  // retention score per current entry (n of them).
  std::vector<double> observe_and_score(const AttentionObservation& obs, int h, int n) {
    std::vector<double> score(n, 0.0);
    switch (config_.base) {
      case Base::H2O: {
        // H2O's score is the attention an entry received from every query since it entered the cache
        // (§3.2, "sum of previous attention scores"); new entries start at zero.
        std::vector<float>& acc = accumulated_[slot(obs.layer, h)];
        acc.resize(n, 0.0f);
        for (int j = 0; j < n; ++j) acc[j] += obs.column_sums[h][j];
        for (int j = 0; j < n; ++j) score[j] = acc[j];
        break;
      }
      case Base::Tova:
        // TOVA: the last query's attention row, A[-1, j] (§2).
        for (int j = 0; j < n; ++j) score[j] = obs.last_row[h][j];
        break;
      case Base::SnapKV: {
        // SnapKV: attention from the last `window` queries, kept as a rolling buffer of rows so decode
        // steps see the same window the prompt blocks do (digest §1.12.2).
        std::deque<std::vector<float>>& rows = window_rows_[slot(obs.layer, h)];
        for (int r = 0; r < obs.window; ++r) {
          const float* row = obs.window_rows[h].data() + static_cast<std::size_t>(r) * n;
          rows.emplace_back(row, row + n);
          if (static_cast<int>(rows.size()) > config_.window) rows.pop_front();
        }
        std::vector<float> sums(n, 0.0f);
        for (const auto& row : rows)
          for (std::size_t j = 0; j < row.size() && j < static_cast<std::size_t>(n); ++j) sums[j] += row[j];
        // Pooling clusters the prefix only; the window itself is protected, as in SnapKV.
        const int prefix = std::max(0, n - config_.window);
        std::vector<float> pooled =
            prefix > 0 ? pool1d(std::span<const float>(sums.data(), prefix), config_.kernel, config_.pooling)
                       : std::vector<float>{};
        for (int j = 0; j < n; ++j) score[j] = j < prefix ? pooled[j] : sums[j];
        break;
      }
    }
    return score;
  }

  void compact_state(int layer, int kv_head, const std::vector<int32_t>& keep) {
    for (int k = 0; k < group_; ++k) {
      const std::size_t s = slot(layer, kv_head * group_ + k);
      if (config_.base == Base::H2O) {
        std::vector<float>& acc = accumulated_[s];
        std::vector<float> kept;
        kept.reserve(keep.size());
        for (int32_t i : keep) kept.push_back(acc[i]);
        acc.swap(kept);
      }
      if (config_.base == Base::SnapKV) {
        for (auto& row : window_rows_[s]) {
          std::vector<float> kept;
          for (int32_t i : keep)
            if (static_cast<std::size_t>(i) < row.size()) kept.push_back(row[i]);
          row.swap(kept);
        }
      }
    }
  }

  // Fig. 1 of the paper: how often adding the values changes which entries go.
  void record_decision(const AttentionObservation& obs, int kv_head, int n, const std::vector<int32_t>& keep,
                       const std::vector<int32_t>& base_keep) {
    std::vector<char> kept(n, 0), base_kept(n, 0);
    for (int32_t i : keep) kept[i] = 1;
    for (int32_t i : base_keep) base_kept[i] = 1;
    int differ = 0;
    for (int j = 0; j < n; ++j) differ += !kept[j] && base_kept[j];
    diagnostics_.append_row(
        "caote_evictions",
        {obs.phase == Phase::Prefill ? 0.0 : 1.0, static_cast<double>(obs.step), static_cast<double>(obs.layer),
         static_cast<double>(kv_head), static_cast<double>(n - static_cast<int>(keep.size())),
         static_cast<double>(differ)},
        "event", "field",
        "one row per eviction: phase (0 prefill block, 1 decode), step, layer, kv_head, entries evicted, entries "
        "evicted by CAOTE that the base score alone would have kept (paper Fig. 1)");
  }

  CaoteConfig config_;
  int layers_ = 0, heads_ = 0, kv_heads_ = 0, group_ = 1, budget_ = 0, prompt_ = 0, seq_len_ = 0;
  std::vector<std::vector<float>> accumulated_;              // H2O: [layer * heads + head][entries]
  std::vector<std::deque<std::vector<float>>> window_rows_;  // SnapKV: last `window` rows per query head
};

}  // namespace

PolicyInfo caote_policy_info() {
  // §4.1: prompt blocks of m = 128 and one eviction per decode step, trimmed before the output (Eq. 7).
  std::vector<ParamSpec> params =
      protocol_params(Protocol{.block = 128, .decode_evict = true, .trim_before_output = true});
  const std::vector<ParamSpec> own = {
      ParamSpec::choice("base", "h2o", {"h2o", "tova", "snapkv"},
                        "base retention score normalised into alpha (§3.2, Eq. 20-22)"),
      ParamSpec::choice("variant", "exact", {"exact", "fast"},
                        "exact: X = V alpha^T (Eq. 8/19); fast: X = mean of the values (FastCAOTE, Eq. 23)"),
      ParamSpec::choice("score", "caote", {"caote", "base"},
                        "caote: evict by the eviction error c_j (Eq. 8/19); base: by the base score alone under the "
                        "same protocol, the paper's \"base\" of every base vs base + CAOTE table (§4)"),
      ParamSpec::choice("gqa", "exact_concat", {"exact_concat", "mean_attn"},
                        "GQA: error of the group's concatenated output (App. B.2) or one error over the mean score"),
      ParamSpec::integer("window", 32, 1, 4096, "SnapKV base: observation window w (protected); digest §1.12.2"),
      ParamSpec::integer("kernel", 5, 1, 63, "SnapKV base: pooling kernel (odd)"),
      ParamSpec::choice("pooling", "avg", {"none", "avg", "max"}, "SnapKV base: pooling of the window scores"),
      ParamSpec::real("recent_ratio", 0.5, 0.0, 1.0,
                      "H2O base: share of b kept for the most recent entries, as H2O itself does (H2O §4: half)"),
      ParamSpec::integer("sinks", 0, 0, 1 << 20, "first entries always kept (not in the paper; 0)"),
      ParamSpec::integer("recent", 0, 0, 1 << 20, "last entries always kept (not in the paper; 0)"),
  };
  params.insert(params.begin(), own.begin(), own.end());
  return {"caote",
          "evicts the entries whose removal changes the attention output least, in closed form over a base score",
          "Goel et al., CAOTE: KV caching through attention output error based token eviction (2025)", params,
          [](const PolicyParams& p) {
            CaoteConfig c;
            c.base = parse_base(p.get_choice("base"));
            c.fast = p.get_choice("variant") == "fast";
            c.protocol = protocol_of(p);
            if (c.protocol.decode_interval > 1)
              throw UsageError("policy 'caote' evicts at every decode step of decode_evict (decode_interval=" +
                               std::to_string(c.protocol.decode_interval) + " is not supported; leave it at 1)");
            if (c.protocol.block_scoring > 0)
              throw UsageError("policy 'caote' does not take block_scoring (leave it 0)");
            if (!c.protocol.prefill_evict)
              throw UsageError("policy 'caote' evicts one entry per decode step from a cache at its budget "
                               "(prefill_evict=false is not supported; leave it true)");
            c.base_only = p.get_choice("score") == "base";
            c.exact_concat = p.get_choice("gqa") == "exact_concat";
            c.window = p.get_int("window");
            c.kernel = p.get_int("kernel");
            if (c.kernel % 2 == 0)
              throw UsageError("policy 'caote' parameter 'kernel' = " + std::to_string(c.kernel) + " must be odd");
            c.pooling = parse_pooling(p.get_choice("pooling"));
            c.h2o_recent_ratio = p.get_float("recent_ratio");
            c.sinks = p.get_int("sinks");
            c.recent = p.get_int("recent");
            return std::make_unique<CaotePolicy>(c);
          }};
}

}  // namespace kvscope::policy
