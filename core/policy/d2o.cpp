// D2O: Dynamic Discriminative Operations (Wan et al., arXiv 2406.13035). Layer budgets from the variance of
// prefill attention-column sums (eqs. 4-5, allocation_d2o.cpp); per layer H2O-style eviction with T sinks,
// N heavy hitters and M recent tokens (eqs. 6-8); every evicted key is matched to its most cosine-similar
// kept key (eq. 9) and merged with GAT-like weights (eqs. 11-12) when the similarity reaches an EMA
// threshold (eq. 10), otherwise discarded. Runs once after prefill and then once per decode step.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/common/error.h"
#include "core/policy/allocation_d2o.h"
#include "core/policy/allocation_report.h"
#include "core/policy/catalog.h"
#include "core/policy/policy_layers.h"
#include "core/policy/selection.h"

namespace kvscope::policy {

namespace {

enum class ThresholdMode { Ema, None, Fixed };
enum class MergeMode { Weighted, Average, Off };

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct D2OSettings {
  int sinks = 4;
  double heavy_recent_ratio = 3.0;
  double beta = 0.7;
  ThresholdMode threshold = ThresholdMode::Ema;
  double fixed_threshold = 1.0;
  MergeMode merge = MergeMode::Weighted;
  bool value_similarity = false;
  bool add_merged_scores = false;
  bool per_head = false;  // App. A.9: budgets per (layer, KV head) instead of per layer
  d2o::AllocationSettings allocation;
};

std::vector<ParamSpec> d2o_params() {
  std::vector<ParamSpec> specs = {
      ParamSpec::integer("sinks", 4, 0, 1 << 20,
                         "T attention-sink tokens always kept (eq. 7; T is not given, spec A6-4)"),
      ParamSpec::real("heavy_recent_ratio", 3.0, 0.0, 1e6,
                      "N:M, heavy hitters per recent token (Sec. 5.1, Tables 9-10: 3:1)"),
      ParamSpec::real("beta", 0.7, 0.0, 1.0, "EMA smoothing of the merge threshold (eq. 10; Table 11: 0.7 best)"),
      ParamSpec::choice("threshold", "ema", {"ema", "none", "fixed"},
                        "merge test: EMA threshold (eq. 10), none = merge every evicted token (Table 6 'w.o. EMA'), "
                        "or a fixed similarity"),
      ParamSpec::real("fixed_threshold", 1.0, -1.0, 2.0,
                      "similarity a match must reach with threshold=fixed (above 1 nothing merges: plain H2O)"),
      ParamSpec::choice("merge", "weighted", {"weighted", "average", "off"},
                        "merge weights: GAT-style softmax of eq. 12, or the plain average of Table 8; off discards "
                        "every victim (the layer operation alone, Table 6; variance_norm=uniform is the other half)"),
      ParamSpec::choice("similarity", "key", {"key", "value"},
                        "vectors compared by cosine in eq. 9 (Table 7: keys best)"),
      ParamSpec::choice("merged_score", "keep", {"keep", "add"},
                        "accumulated attention of a merge target: unchanged (spec A6-8) or plus its sources'"),
      ParamSpec::choice("allocation_level", "layer", {"layer", "head"},
                        "layer level: one budget per layer (eq. 5, the paper's experiments), or per (layer, KV head) "
                        "from every head's own F_v (App. A.9, eqs. 17 and 20), summing to L * H * b"),
  };
  // The layer-level operation is the d2o allocation's; a doc of its own lists these under the policy too.
  for (auto& spec : d2o::allocation_params()) {
    spec.doc = "layer level: " + spec.doc;
    specs.push_back(std::move(spec));
  }
  return specs;
}

D2OSettings d2o_settings(const PolicyParams& p) {
  D2OSettings s;
  s.sinks = p.get_int("sinks");
  s.heavy_recent_ratio = p.get_float("heavy_recent_ratio");
  s.beta = p.get_float("beta");
  const std::string& threshold = p.get_choice("threshold");
  s.threshold = threshold == "none" ? ThresholdMode::None : threshold == "fixed" ? ThresholdMode::Fixed : ThresholdMode::Ema;
  s.fixed_threshold = p.get_float("fixed_threshold");
  const std::string& merge = p.get_choice("merge");
  s.merge = merge == "average" ? MergeMode::Average : merge == "off" ? MergeMode::Off : MergeMode::Weighted;
  s.value_similarity = p.get_choice("similarity") == "value";
  s.add_merged_scores = p.get_choice("merged_score") == "add";
  s.per_head = p.get_choice("allocation_level") == "head";
  s.allocation = d2o::allocation_settings(p);
  return s;
}

// The EMA threshold of one (layer, KV head); undefined until its first eviction.
struct Threshold {
  bool defined = false;
  double tau = kNaN;
};

// What one eviction pass on one (layer, KV head) did.
struct HeadOutcome {
  cache::HeadEdit edit;
  int merged = 0;
  int discarded = 0;
  double best_similarity = kNaN;  // mean over this pass's evicted entries of their best similarity
};

// The T / N / M split of one layer's capacity (eq. 7: S = T + N + M, N:M = heavy_recent_ratio).
struct Split {
  int sinks = 0, heavy = 0, recent = 0;
};

// Eq. 9: u_ij = k_i . k_j / (||k_i|| ||k_j||) for evicted i and kept j, and for each i its nearest kept
// entry argmax_j u_ij (the earliest on ties) with that similarity. A zero vector has similarity 0 to all.
// Unit rows and BLAS in blocks of evicted rows: the prompt pass compares n_e x n_c pairs per head.
void nearest_kept(std::span<const float> rows, int d, const std::vector<int32_t>& evicted,
                  const std::vector<int32_t>& keep, std::vector<int32_t>& nearest, std::vector<double>& best) {
  auto unit_rows = [&](const std::vector<int32_t>& index) {
    std::vector<float> unit(index.size() * static_cast<std::size_t>(d));
    for (std::size_t r = 0; r < index.size(); ++r) {
      const float* x = &rows[static_cast<std::size_t>(index[r]) * d];
      double norm = 0.0;
      for (int t = 0; t < d; ++t) norm += static_cast<double>(x[t]) * x[t];
      const float inv = norm > 0.0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.0f;
      for (int t = 0; t < d; ++t) unit[r * d + t] = x[t] * inv;
    }
    return unit;
  };
  const std::vector<float> ue = unit_rows(evicted), uc = unit_rows(keep);
  const int ne = static_cast<int>(evicted.size()), nc = static_cast<int>(keep.size());
  nearest.assign(ne, -1);
  best.assign(ne, -std::numeric_limits<double>::infinity());
  if (ne == 0 || nc == 0) return;
  constexpr int kBlock = 128;
  std::vector<float> u(static_cast<std::size_t>(std::min(kBlock, ne)) * nc);
  for (int r0 = 0; r0 < ne; r0 += kBlock) {
    const int m = std::min(kBlock, ne - r0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nc, d, 1.0f, ue.data() + static_cast<std::size_t>(r0) * d, d,
                uc.data(), d, 0.0f, u.data(), nc);
    for (int r = 0; r < m; ++r) {
      const float* row = &u[static_cast<std::size_t>(r) * nc];
      const int top = static_cast<int>(std::max_element(row, row + nc) - row);  // first maximum
      nearest[r0 + r] = keep[top];
      best[r0 + r] = row[top];
    }
  }
}

Split split_capacity(int capacity, const D2OSettings& s) {
  Split split;
  split.sinks = std::min(s.sinks, capacity);
  const int rest = capacity - split.sinks;
  // floor, as the h2o policy rounds its recent share, so that equal splits select alike.
  split.recent = std::clamp(static_cast<int>(std::floor(rest / (s.heavy_recent_ratio + 1.0))), 0, rest);
  split.heavy = rest - split.recent;
  return split;
}

class D2OPolicy final : public Policy {
 public:
  explicit D2OPolicy(const PolicyParams& params)
      : settings_(d2o_settings(params)), allocation_(settings_.allocation) {}

  std::string name() const override { return "d2o"; }

  ObservationRequest request(int, Phase) const override {
    ObservationRequest r;
    r.column_sums = true;  // eq. 4 and eq. 6 (prefill: all prompt queries; decode: the one new query)
    return r;
  }

  void begin(const RunInfo& info) override {
    layers_ = info.config.n_layers;
    kv_heads_ = info.config.n_kv_heads;
    group_ = info.config.group_size();
    budget_ = info.budget > 0 ? info.budget : info.prompt_length;
    decided_ = PolicyLayers(info.config, swa_mode());
    allocation_.reset();
    allocated_ = false;
    prompt_budgets_.clear();
    capacity_.clear();
    splits_.clear();
    thresholds_.assign(static_cast<std::size_t>(layers_) * kv_heads_, Threshold{});
    step_merged_.assign(layers_, 0);
    step_discarded_.assign(layers_, 0);
    step_similarity_.assign(static_cast<std::size_t>(layers_) * kv_heads_, kNaN);
    diagnostics_ = Diagnostics{};
  }

  cache::CacheEdit after_layer(const AttentionObservation& obs, cache::KVCache& cache) override {
    const int layer = obs.layer;
    accumulate_scores(obs, cache);
    if (obs.phase == Phase::Prefill) {
      // Budgets need every layer's F_v, so prefill eviction waits for after_step.
      allocation_.observe(decided_.every_layer() ? obs : decided_.renumbered(obs));
      return {};
    }
    cache::CacheEdit edit;
    if (!allocated_) return edit;
    for (int g = 0; g < kv_heads_; ++g) {
      if (cache.size(layer, g) <= capacity(layer, g)) continue;
      HeadOutcome outcome = evict(layer, g, cache, /*prompt_pass=*/false);
      step_merged_[layer] += outcome.merged;
      step_discarded_[layer] += outcome.discarded;
      step_similarity_[static_cast<std::size_t>(layer) * kv_heads_ + g] = outcome.best_similarity;
      edit.heads.push_back(std::move(outcome.edit));
    }
    return edit;
  }

  cache::CacheEdit after_step(const StepInfo& step, cache::KVCache& cache) override {
    cache::CacheEdit edit;
    if (step.phase == Phase::Prefill) {
      if (!step.prefill_done) return edit;
      allocate(step.seq_len);
      edit = evict_prompt(cache);
    }
    record_step();
    return edit;
  }

  int expected_length(int layer, int kv_head, const StepInfo& step) const override {
    if (!allocated_) return -1;
    return std::min(step.seq_len, capacity(layer, kv_head));
  }

  // Per layer; with allocation_level=head, the mean of the layer's heads rounded down (the record keeps
  // every head's in `head_capacity`).
  std::vector<int> layer_budgets() const override {
    if (!allocated_) return std::vector<int>(layers_, budget_);
    std::vector<int> out(layers_, 0);
    for (int l = 0; l < layers_; ++l) {
      for (int g = 0; g < kv_heads_; ++g) out[l] += capacity(l, g);
      out[l] /= kv_heads_;
    }
    return out;
  }

 private:
  int capacity(int layer, int kv_head) const {
    return capacity_[static_cast<std::size_t>(layer) * kv_heads_ + kv_head];
  }
  const Split& split(int layer, int kv_head) const {
    return splits_[static_cast<std::size_t>(layer) * kv_heads_ + kv_head];
  }

  // Eq. 6: AttnScore accumulates each key's attention, summed over the query heads sharing its KV head
  // (spec A6-5), in the cache's per-entry score slot.
  void accumulate_scores(const AttentionObservation& obs, cache::KVCache& cache) const {
    for (int g = 0; g < kv_heads_; ++g) {
      std::span<float> scores = cache.mutable_scores(obs.layer, g);
      const int n = std::min<int>(obs.n_keys[g], static_cast<int>(scores.size()));
      for (int h = g * group_; h < (g + 1) * group_; ++h) {
        const std::vector<float>& col = obs.column_sums[h];
        for (int j = 0; j < n; ++j) scores[j] += col[j];
      }
    }
  }

  void allocate(int seq_len) {
    // Eq. 5 with S = n: the prompt's share of each layer. A budget beyond the prompt cannot be spent on
    // the prompt; it becomes decode headroom, the same for every layer, so the average stays the budget.
    const int prompt_budget = std::min(budget_, seq_len);
    // Eq. 5 over the layers D2O decides; a sliding-window layer it leaves alone evicts nothing (its window does).
    const int decided = decided_.size();
    prompt_budgets_ = decided_.to_model_layers(allocation_.budgets(decided, prompt_budget, seq_len), seq_len);
    std::vector<std::vector<int>> per_head;
    if (settings_.per_head)
      per_head = decided_.to_model_layers(allocation_.head_budgets(decided, prompt_budget, seq_len),
                                          std::vector<int>(kv_heads_, seq_len));
    const int headroom = std::max(0, budget_ - seq_len);
    capacity_.resize(static_cast<std::size_t>(layers_) * kv_heads_);
    splits_.resize(capacity_.size());
    for (int l = 0; l < layers_; ++l)
      for (int g = 0; g < kv_heads_; ++g) {
        const std::size_t i = static_cast<std::size_t>(l) * kv_heads_ + g;
        capacity_[i] = (settings_.per_head ? per_head[l][g] : prompt_budgets_[l]) + headroom;
        splits_[i] = split_capacity(capacity_[i], settings_);
      }
    allocated_ = true;

    const std::vector<double> shares =
        settings_.per_head ? std::vector<double>(layers_, kNaN) : decided_.to_model_layers(allocation_.shares(), kNaN);
    const double rho = static_cast<double>(prompt_budget) / seq_len;
    const bool exp_decay = settings_.allocation.norm == d2o::AllocNorm::ExpDecay;
    std::vector<double> alpha_raw(layers_), alpha(layers_), split_values, head_capacity;
    for (int l = 0; l < layers_; ++l) {
      // Eq. 5, or Table 4's exponential decay rho * exp(-F_v) (no L: not a share).
      alpha_raw[l] = settings_.per_head ? kNaN : (exp_decay ? 1 : decided) * rho * shares[l];
      alpha[l] = decided_.slot(l) < 0 ? kNaN : static_cast<double>(prompt_budgets_[l]) / seq_len;
      for (int g = 0; g < kv_heads_; ++g) {
        const Split& s = split(l, g);
        head_capacity.push_back(capacity(l, g));
        if (g == 0 || settings_.per_head)
          split_values.insert(split_values.end(), {double(s.sinks), double(s.heavy), double(s.recent)});
      }
    }
    auto per_layer = [&](std::vector<double> v, const std::string& description) {
      return Series{std::move(v), {layers_}, {"layer"}, description};
    };
    Diagnostics published;
    allocation_.publish(published);  // layer_variance (eq. 4) and layer_share (eq. 5)
    decided_.publish_to_model_layers(published, diagnostics_);
    diagnostics_.set("alpha_raw", per_layer(alpha_raw, "alpha_l of eq. 5 before clamping"));
    diagnostics_.set("alpha", per_layer(alpha, "alpha_l = S_l / n after clamping and water-filling (spec A6-2/3)"));
    diagnostics_.set("prompt_budget", per_layer(std::vector<double>(prompt_budgets_.begin(), prompt_budgets_.end()),
                                                "S_l = alpha_l * n (eq. 5), tokens per KV head"));
    const std::vector<int> held = layer_budgets();
    diagnostics_.set("capacity", per_layer(std::vector<double>(held.begin(), held.end()),
                                           "cache size held during decoding: S_l plus max(0, budget - n) (per-head "
                                           "allocation: the mean of the layer's heads, rounded down)"));
    diagnostics_.set("head_capacity", Series{head_capacity,
                                             {layers_, kv_heads_},
                                             {"layer", "kv_head"},
                                             "cache size each (layer, KV head) holds during decoding (App. A.9 with "
                                             "allocation_level=head; otherwise the layer's)"});
    if (settings_.per_head)
      diagnostics_.set("token_split",
                       Series{split_values,
                              {layers_, kv_heads_, 3},
                              {"layer", "kv_head", "part"},
                              "T sinks, N heavy hitters, M recent tokens of each head's capacity (eq. 7)"});
    else
      diagnostics_.set("token_split", Series{split_values,
                                             {layers_, 3},
                                             {"layer", "part"},
                                             "T sinks, N heavy hitters, M recent tokens of the capacity (eq. 7)"});
    diagnostics_.set_setting("allocation_level", settings_.per_head ? "\"head\"" : "\"layer\"");
    long total = 0;
    for (std::size_t i = 0; i < capacity_.size(); ++i)
      if (decided_.slot(static_cast<int>(i) / kv_heads_) >= 0) total += capacity_[i];
    diagnostics_.set_setting("allocated_tokens", std::to_string(total));
    report_layer_budgets(settings_.per_head ? held : prompt_budgets_, seq_len, prompt_budget, 0, "policy 'd2o'",
                         diagnostics_, &decided_);
  }

  cache::CacheEdit evict_prompt(cache::KVCache& cache) {
    const int pairs = layers_ * kv_heads_;
    std::vector<char> evicts(pairs, 0);
    for (int p = 0; p < pairs; ++p) evicts[p] = cache.size(p / kv_heads_, p % kv_heads_) > capacity_[p];
    // The n_e x n_c similarity of eq. 9 is the costly part of D2O. Heads are independent (their own
    // scores, keys and threshold), so they run in parallel, each calling single-threaded BLAS as the
    // engine's kernels do.
    std::vector<HeadOutcome> outcomes(pairs);
#pragma omp parallel for schedule(dynamic, 1)
    for (int p = 0; p < pairs; ++p)
      if (evicts[p]) outcomes[p] = evict(p / kv_heads_, p % kv_heads_, cache, /*prompt_pass=*/true);
    cache::CacheEdit edit;
    for (int p = 0; p < pairs; ++p) {
      if (!evicts[p]) continue;
      step_merged_[p / kv_heads_] += outcomes[p].merged;
      step_discarded_[p / kv_heads_] += outcomes[p].discarded;
      step_similarity_[p] = outcomes[p].best_similarity;
      edit.heads.push_back(std::move(outcomes[p].edit));
    }
    return edit;
  }

  HeadOutcome evict(int layer, int kv_head, cache::KVCache& cache, bool prompt_pass) {
    const int n = cache.size(layer, kv_head);
    const int d = cache.head_dim();
    const Split split = this->split(layer, kv_head);
    std::span<float> cache_scores = cache.mutable_scores(layer, kv_head);
    std::vector<float> scores(cache_scores.begin(), cache_scores.end());

    // Eqs. 7-8: K_c = [K[:T], K[TopN(AttnScore[T:-M])], K[-M:]]; the rest is the eviction set K_e.
    std::vector<int32_t> keep = keep_top_scores(scores, capacity(layer, kv_head), split.sinks, split.recent);
    std::vector<char> kept(n, 0);
    for (int32_t i : keep) kept[i] = 1;
    std::vector<int32_t> evicted;
    for (int i = 0; i < n; ++i)
      if (!kept[i]) evicted.push_back(i);

    // Eq. 9: each evicted entry's most similar kept entry.
    std::vector<int32_t> nearest;
    std::vector<double> best;
    nearest_kept(settings_.value_similarity ? cache.values(layer, kv_head) : cache.keys(layer, kv_head), d, evicted,
                 keep, nearest, best);

    // Eq. 10: tau_0 = mean of the row maxima of U on the first eviction (the prompt), then
    // tau_t = beta * max(U_t) + (1 - beta) * tau_{t-1} per decode eviction.
    Threshold& th = thresholds_[static_cast<std::size_t>(layer) * kv_heads_ + kv_head];
    std::vector<char> merge(evicted.size(), 0);
    if (!evicted.empty() && (prompt_pass || !th.defined)) {
      double sum = 0.0;
      for (double u : best) sum += u;
      th.tau = sum / static_cast<double>(best.size());
      th.defined = true;
      for (std::size_t e = 0; e < evicted.size(); ++e) merge[e] = best[e] >= th.tau;
    } else {
      for (std::size_t e = 0; e < evicted.size(); ++e) {
        const double previous = th.tau;
        th.tau = settings_.beta * best[e] + (1.0 - settings_.beta) * previous;
        // u >= tau_t  <=>  u >= tau_{t-1} for beta < 1; testing the latter avoids rounding at equality,
        // and beta = 1 (tau_t = u) merges every victim, as the EMA form implies.
        merge[e] = settings_.beta >= 1.0 || best[e] >= previous;
      }
    }
    if (settings_.threshold == ThresholdMode::None) std::fill(merge.begin(), merge.end(), 1);
    if (settings_.threshold == ThresholdMode::Fixed)
      for (std::size_t e = 0; e < evicted.size(); ++e) merge[e] = best[e] >= settings_.fixed_threshold;
    // The layer operation alone (Table 6's components one at a time): every victim is discarded, as H2O does.
    if (settings_.merge == MergeMode::Off) std::fill(merge.begin(), merge.end(), 0);

    HeadOutcome out;
    out.edit = keep_edit(layer, kv_head, std::move(keep), scores);
    out.edit.secondary_scores.assign(n, std::numeric_limits<float>::quiet_NaN());
    double similarity_sum = 0.0;
    for (std::size_t e = 0; e < evicted.size(); ++e) {
      out.edit.secondary_scores[evicted[e]] = static_cast<float>(best[e]);
      similarity_sum += best[e];
    }
    if (!evicted.empty()) out.best_similarity = similarity_sum / static_cast<double>(evicted.size());

    // Eqs. 11-12: each kept token j absorbs the evicted tokens G_j matched to it:
    // w_cj = e / (sum_{i in G_j} exp(u_ij) + e), w_ei = exp(u_ij) / (sum_{i in G_j} exp(u_ij) + e)
    // (per-token reading of w_ei, spec A6-6; e = exp(1) is the target's self-similarity term).
    std::vector<std::vector<std::size_t>> groups(n);
    for (std::size_t e = 0; e < evicted.size(); ++e) {
      if (merge[e]) {
        groups[nearest[e]].push_back(e);
        ++out.merged;
      } else {
        ++out.discarded;
      }
    }
    for (int j = 0; j < n; ++j) {
      if (groups[j].empty()) continue;
      cache::MergeGroup group;
      group.target = j;
      if (settings_.merge == MergeMode::Average) {
        const float w = 1.0f / static_cast<float>(groups[j].size() + 1);
        group.weights.assign(groups[j].size() + 1, w);
        for (std::size_t e : groups[j]) group.sources.push_back(evicted[e]);
      } else {
        double z = std::exp(1.0);
        for (std::size_t e : groups[j]) z += std::exp(best[e]);
        group.weights.push_back(static_cast<float>(std::exp(1.0) / z));
        for (std::size_t e : groups[j]) {
          group.sources.push_back(evicted[e]);
          group.weights.push_back(static_cast<float>(std::exp(best[e]) / z));
        }
      }
      // The cache adds a merge's source scores into its target; zeroing the (evicted) sources first keeps
      // the target's AttnScore as it was (spec A6-8). edit.scores keeps the real values for the record.
      if (!settings_.add_merged_scores)
        for (int32_t s : group.sources) cache_scores[s] = 0.0f;
      out.edit.merges.push_back(std::move(group));
    }
    return out;
  }

  // One row per step (the prompt, then each decode step): thresholds, victim similarity, decisions.
  void record_step() {
    std::vector<double> tau(thresholds_.size());
    for (std::size_t p = 0; p < thresholds_.size(); ++p) tau[p] = thresholds_[p].defined ? thresholds_[p].tau : kNaN;
    const std::string column = "layer_kv_head";
    diagnostics_.append_row("threshold", tau, "step", column,
                            "EMA merge threshold tau per (layer, kv head), column = layer * kv_heads + kv_head "
                            "(eq. 10; NaN before the head's first eviction); row 0 is the prompt");
    diagnostics_.append_row("victim_similarity", step_similarity_, "step", column,
                            "best cosine similarity max_j u_ij of the evicted entries (eq. 9), mean over the step's "
                            "evictions; NaN when the head evicted nothing");
    diagnostics_.append_row("merged", std::vector<double>(step_merged_.begin(), step_merged_.end()), "step", "layer",
                            "evicted entries merged into a kept entry (eqs. 11-12), summed over kv heads");
    diagnostics_.append_row("discarded", std::vector<double>(step_discarded_.begin(), step_discarded_.end()), "step",
                            "layer", "evicted entries below the threshold, dropped for good (eq. 10)");
    std::fill(step_merged_.begin(), step_merged_.end(), 0);
    std::fill(step_discarded_.begin(), step_discarded_.end(), 0);
    std::fill(step_similarity_.begin(), step_similarity_.end(), kNaN);
  }

  D2OSettings settings_;
  d2o::D2OAllocation allocation_;
  int layers_ = 0, kv_heads_ = 0, group_ = 1, budget_ = 0;
  PolicyLayers decided_;  // the layers eq. 5 shares the budget over (policy_layers.h)
  bool allocated_ = false;
  std::vector<int> prompt_budgets_;  // S_l
  std::vector<int> capacity_;        // [layer * kv_heads + kv_head]: S_l (or S_l^h) + decode headroom
  std::vector<Split> splits_;        // [layer * kv_heads + kv_head]
  std::vector<Threshold> thresholds_;  // [layer * kv_heads + kv_head]
  std::vector<int> step_merged_, step_discarded_;
  std::vector<double> step_similarity_;
};

}  // namespace

PolicyInfo d2o_policy_info() {
  return {"d2o",
          "inverse-variance layer budgets; H2O eviction whose victims merge into similar kept keys above an EMA threshold",
          "Wan et al., D2O: Dynamic Discriminative Operations for Efficient Generative Inference of LLMs (arXiv 2406.13035)",
          d2o_params(), [](const PolicyParams& p) { return std::make_unique<D2OPolicy>(p); }};
}

}  // namespace kvscope::policy
