// KVMerger (anonymous ICLR submission): post-RoPE keys of neighbouring tokens are highly cosine-similar,
// so after prefill each (layer, KV head) keeps its recent tokens and heavy hitters verbatim and folds
// the rest into contiguous merging sets (Algorithm 1), each replaced by one Gaussian-kernel-weighted
// average around its highest-attention pivot (Algorithm 2, Eq. 5-8). The paper fixes the similarity
// threshold and lets the size follow (`mode=threshold`); `mode=budget` (the default) meets the run's token
// budget exactly, as every other policy does, with the paper's threshold (evicting the sets with the least
// attention when they do not fit) or, with `theta_search=bisect`, the threshold searched per head.
// The recent / heavy-hitter split follows the budget (kvmerger_split.h). Decode tokens append (the paper), or
// with decode_evict (CAKE §5's protocol) one entry per step leaves by Algorithm 2 applied to a pair.
// See docs/policies.md, "kvmerger".
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/common/error.h"
#include "core/policy/catalog.h"
#include "core/policy/kvmerger_split.h"
#include "kernels/common/merge_math.h"

namespace kvscope::policy {

namespace {

enum class SigmaMode { MeanDistance, Eq7Literal, Fixed };

struct MergerConfig {
  bool budget_mode = true;
  bool search_theta = false;  // budget mode: bisect the threshold per head, or keep `theta`
  double theta = 0.75;
  double theta_floor = -1.0;  // the lowest threshold the bisection may reach
  bool split_follows_budget = true;
  double recent_ratio = 0.17;  // split=fixed
  double hh_ratio = 0.12;
  bool random_pivot = false;  // Table 3 ablation
  unsigned pivot_seed = 0;
  bool average_weights = false;  // Table 4 ablation
  SigmaMode sigma_mode = SigmaMode::MeanDistance;
  double sigma = 1.0;         // for SigmaMode::Fixed
  bool split_at_gaps = true;  // run Algorithm 1 on each stretch of consecutive positions
  bool anchor_latest = true;  // compare with the set's anchor (Algorithm 1) or with the adjacent key
  bool decode_evict = false;  // CAKE's protocol: hold every head at its post-prefill size while decoding
};

// Bisection steps for the budget-mode threshold: 2^-40 of the cosine range is far below any gap
// between distinct similarities of float keys.
constexpr int kThresholdSteps = 40;

double dot(const float* a, const float* b, int d) {
  double s = 0.0;
  for (int t = 0; t < d; ++t) s += static_cast<double>(a[t]) * b[t];
  return s;
}

// Eq. 3, clamped to [-1, 1] so that rounding never lets theta = 1 merge identical keys.
double cosine(const float* a, const float* b, int d) {
  const double na = std::sqrt(dot(a, a, d)), nb = std::sqrt(dot(b, b, d));
  return na > 0.0 && nb > 0.0 ? std::clamp(dot(a, b, d) / (na * nb), -1.0, 1.0) : 0.0;
}

double distance(const float* a, const float* b, int d) {
  double s = 0.0;
  for (int t = 0; t < d; ++t) {
    const double diff = static_cast<double>(a[t]) - b[t];
    s += diff * diff;
  }
  return std::sqrt(s);
}

struct MergeSet {
  std::vector<int32_t> members;  // ascending entry indices
};

class KVMergerPolicy final : public Policy {
 public:
  explicit KVMergerPolicy(const MergerConfig& config) : config_(config) {}

  std::string name() const override { return "kvmerger"; }

  ObservationRequest request(int, Phase phase) const override {
    ObservationRequest r;
    // Eq. 6: a_i sums the attention map of the whole prompt, so one exact prefill pass supplies it; decode
    // eviction keeps accumulating it, as H2O does.
    r.column_sums = phase == Phase::Prefill || config_.decode_evict;
    return r;
  }

  void begin(const RunInfo& info) override {
    layers_ = info.config.n_layers;
    kv_heads_ = info.config.n_kv_heads;
    group_ = info.config.group_size();
    budget_ = info.budget;
    prompt_ = info.prompt_length;
    if (budget_ < 1) throw UsageError("kvmerger needs a budget of at least 1 token per layer and KV head");
    kept_after_prefill_.assign(static_cast<std::size_t>(layers_) * kv_heads_, 0);
    thresholds_.assign(static_cast<std::size_t>(layers_) * kv_heads_, config_.theta);
    heads_without_room_ = 0;
    recent_tokens_ = heavy_tokens_ = 0;
    seq_len_ = 0;
    set_count_ = 0;
    decode_merges_ = decode_evictions_ = 0;
    diagnostics_ = Diagnostics();
    diagnostics_.set_setting("decode_evict", config_.decode_evict ? "true" : "false");
  }

  cache::CacheEdit after_layer(const AttentionObservation& obs, cache::KVCache& cache) override {
    cache::CacheEdit edit;
    // Decode tokens append (digest §2.3, "when it runs") unless decode_evict.
    if (obs.phase != Phase::Prefill) return config_.decode_evict ? evict_decode(obs, cache) : edit;
    for (int g = 0; g < kv_heads_; ++g) {
      cache::HeadEdit head = merge_head(obs, cache, g);
      // Eq. 6's a_j travels with its entry (a merged entry adds up its members') for decode eviction.
      if (config_.decode_evict)
        std::copy(head.scores.begin(), head.scores.end(), cache.mutable_scores(obs.layer, g).begin());
      kept_after_prefill_[static_cast<std::size_t>(obs.layer) * kv_heads_ + g] = static_cast<int>(head.keep.size());
      if (static_cast<int>(head.keep.size()) < obs.n_keys[g]) edit.heads.push_back(std::move(head));
    }
    return edit;
  }

  cache::CacheEdit after_step(const StepInfo& step, cache::KVCache&) override {
    seq_len_ = step.seq_len;
    if (step.phase == Phase::Prefill && step.prefill_done) publish_settings();
    if (config_.decode_evict && step.phase == Phase::Decode) {
      diagnostics_.set_setting("decode_merges", std::to_string(decode_merges_));
      diagnostics_.set_setting("decode_evictions", std::to_string(decode_evictions_));
    }
    return {};
  }

  int expected_length(int layer, int kv_head, const StepInfo& step) const override {
    if (config_.decode_evict && step.phase == Phase::Decode) return decode_target(layer, kv_head, step.seq_len);
    // The paper's threshold sets the size per head; only budget mode promises one.
    if (!config_.budget_mode) return -1;
    return std::min(prompt_, budget_) + (step.seq_len - prompt_);
  }

  // The prompt budget, as every policy reports it (Policy::layer_budgets): the most prompt entries a KV head of
  // the layer kept after prefill. Decode tokens appended later are growth, not budget; counting them here made
  // KVMerger look as if it had more budget than SnapKV at the same setting.
  std::vector<int> layer_budgets() const override {
    std::vector<int> out(layers_, 0);
    for (int l = 0; l < layers_; ++l)
      for (int g = 0; g < kv_heads_; ++g)
        out[l] = std::max(out[l], kept_after_prefill_[static_cast<std::size_t>(l) * kv_heads_ + g]);
    return out;
  }

 private:
  // The size decode eviction holds a head at: the budget in budget mode (a short prompt grows to it), the
  // size the paper's threshold left in threshold mode.
  int decode_target(int layer, int kv_head, int seq_len) const {
    if (config_.budget_mode) return std::min(budget_, seq_len);
    return kept_after_prefill_[static_cast<std::size_t>(layer) * kv_heads_ + kv_head];
  }

  // CAKE's protocol for KVMerger (kvscope's construction; the paper compresses the prompt only). a_j keeps
  // accumulating (Eq. 6, group mean); once a head is over its size, the entry with the least a_j outside the
  // recent tokens is the victim. If its key is more similar than theta (Eq. 3) to an adjacent entry (not a
  // recent one), the two form a merging set and Algorithm 2 merges them (pivot by Eq. 6, Gaussian weights by
  // Eq. 7-8); otherwise the victim is evicted.
  cache::CacheEdit evict_decode(const AttentionObservation& obs, cache::KVCache& cache) {
    cache::CacheEdit edit;
    const int l = obs.layer, d = cache.head_dim();
    for (int g = 0; g < kv_heads_; ++g) {
      std::span<float> acc = cache.mutable_scores(l, g);
      const int n = static_cast<int>(acc.size());
      for (int k = 0; k < group_; ++k)
        for (int j = 0; j < n; ++j) acc[j] += obs.column_sums[g * group_ + k][j] / group_;
      if (n <= decode_target(l, g, obs.query_positions.back() + 1)) continue;
      // The newest entry has one row of attention; it stays even when the prompt left no recent tokens.
      const int recent = std::clamp(recent_tokens_, 1, n - 1);
      int victim = 0;
      for (int j = 1; j < n - recent; ++j)
        if (acc[j] < acc[victim]) victim = j;
      int partner = -1;
      double best = config_.theta;
      for (int j : {victim - 1, victim + 1}) {
        if (j < 0 || j >= n - recent) continue;  // recent tokens stay verbatim, as in the prompt's K_c
        const double c = cosine(cache.key(l, g, victim), cache.key(l, g, j), d);
        if (c > best) best = c, partner = j;
      }
      cache::HeadEdit head;
      head.layer = l;
      head.kv_head = g;
      head.scores.assign(acc.begin(), acc.end());
      const std::vector<double> a(acc.begin(), acc.end());
      int kept = victim;  // the pair's pivot stays; without a partner nothing of the victim does
      if (partner >= 0) {
        MergeSet pair{{std::min(victim, partner), std::max(victim, partner)}};
        kept = merge_into_pivot(pair, cache, l, g, a, head);
        ++decode_merges_;
      } else {
        ++decode_evictions_;
      }
      const int gone = partner < 0 ? victim : (kept == victim ? partner : victim);
      for (int j = 0; j < n; ++j)
        if (j != gone) head.keep.push_back(j);
      edit.heads.push_back(std::move(head));
    }
    return edit;
  }

  // Algorithm 1 over one stretch of candidate entries `run` (ascending), walking backwards from the
  // latest key; a key joins the current set while its cosine with the set's anchor exceeds theta.
  void cluster(const std::vector<int32_t>& run, const cache::KVCache& cache, int l, int g, double theta,
               std::vector<MergeSet>& sets) const {
    if (run.empty()) return;
    const int d = cache.head_dim();
    int anchor = run.back();
    MergeSet current{{anchor}};
    for (int r = static_cast<int>(run.size()) - 2; r >= 0; --r) {
      const int i = run[r];
      if (cosine(cache.key(l, g, i), cache.key(l, g, anchor), d) > theta) {
        current.members.push_back(i);
        if (!config_.anchor_latest) anchor = i;
      } else {
        std::reverse(current.members.begin(), current.members.end());
        sets.push_back(std::move(current));
        anchor = i;
        current = MergeSet{{i}};
      }
    }
    // The paper's listing returns without adding the last set; every candidate must land in one.
    std::reverse(current.members.begin(), current.members.end());
    sets.push_back(std::move(current));
  }

  // The split, the thresholds used and what went unmerged, as run settings (every head saw the same n).
  void publish_settings() {
    const double n = prompt_;
    diagnostics_.set_setting("split", config_.split_follows_budget ? "\"budget\"" : "\"fixed\"");
    diagnostics_.set_setting("recent_tokens", std::to_string(recent_tokens_));
    diagnostics_.set_setting("heavy_tokens", std::to_string(heavy_tokens_));
    diagnostics_.set_setting("recent_share", std::to_string(recent_tokens_ / n));
    diagnostics_.set_setting("heavy_share", std::to_string(heavy_tokens_ / n));
    std::string thetas = "[";
    for (int l = 0; l < layers_; ++l) {
      thetas += l ? ", [" : "[";
      for (int g = 0; g < kv_heads_; ++g)
        thetas += (g ? ", " : "") + std::to_string(thresholds_[static_cast<std::size_t>(l) * kv_heads_ + g]);
      thetas += "]";
    }
    diagnostics_.set_setting("theta_used", thetas + "]");
    diagnostics_.set_setting("heads_without_room_to_merge", std::to_string(heads_without_room_));
    if (heads_without_room_ > 0)
      diagnostics_.warn("kvmerger: in " + std::to_string(heads_without_room_) + " of " +
                        std::to_string(layers_ * kv_heads_) + " (layer, KV head) pairs the " +
                        std::to_string(recent_tokens_) + " recent tokens and " + std::to_string(heavy_tokens_) +
                        " heavy hitters fill the budget of " + std::to_string(budget_) +
                        ": nothing is merged there, the policy is recent + heavy hitters");
  }

  std::vector<MergeSet> identify(const std::vector<std::vector<int32_t>>& runs, const cache::KVCache& cache, int l,
                                 int g, double theta) const {
    std::vector<MergeSet> sets;
    for (auto it = runs.rbegin(); it != runs.rend(); ++it) cluster(*it, cache, l, g, theta, sets);
    std::reverse(sets.begin(), sets.end());
    return sets;
  }

  cache::HeadEdit merge_head(const AttentionObservation& obs, const cache::KVCache& cache, int g) {
    const int l = obs.layer;
    const int n = obs.n_keys[g];
    cache::HeadEdit head;
    head.layer = l;
    head.kv_head = g;

    // Eq. 6 with GQA as in §6.2: one attention map per KV head, the mean of its query heads' maps.
    std::vector<double> a(n, 0.0);
    for (int k = 0; k < group_; ++k)
      for (int j = 0; j < n; ++j) a[j] += obs.column_sums[g * group_ + k][j] / group_;
    head.scores.assign(a.begin(), a.end());

    if (config_.budget_mode && n <= budget_) {
      head.keep.resize(n);
      std::iota(head.keep.begin(), head.keep.end(), 0);
      return head;
    }

    // K_c: the most recent tokens and, among the rest, the heavy hitters by a (§6.1 shares of n).
    const KVMergerShares shares = config_.split_follows_budget ? kvmerger_shares(static_cast<double>(budget_) / n)
                                                               : KVMergerShares{config_.recent_ratio, config_.hh_ratio};
    int recent = static_cast<int>(std::lround(shares.recent * n));
    int heavy = static_cast<int>(std::lround(shares.heavy * n));
    if (config_.budget_mode) {
      recent = std::min(recent, budget_);
      heavy = std::min(heavy, budget_ - recent);
    }
    recent = std::min(recent, n);
    heavy = std::min(heavy, n - recent);
    std::vector<char> conserved(n, 0);
    for (int j = n - recent; j < n; ++j) conserved[j] = 1;
    std::vector<int32_t> order(n - recent);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return a[x] > a[y]; });
    for (int i = 0; i < heavy; ++i) conserved[order[i]] = 1;

    // K_m, as stretches of consecutive entries so no set straddles a conserved token (digest §2.8.4).
    std::vector<std::vector<int32_t>> runs(1);
    for (int j = 0; j < n; ++j) {
      if (conserved[j]) {
        if (config_.split_at_gaps && !runs.back().empty()) runs.emplace_back();
        continue;
      }
      runs.back().push_back(j);
    }
    const int candidates = n - recent - heavy;
    recent_tokens_ = recent;
    heavy_tokens_ = heavy;

    double theta = config_.theta;
    int dropped = 0;  // candidates evicted outright because not even one set per stretch fits
    std::vector<MergeSet> sets;
    if (!config_.budget_mode) {
      sets = identify(runs, cache, l, g, theta);
    } else {
      const int room = budget_ - recent - heavy;
      if (room > 0 && candidates > 0 && !config_.search_theta) {
        sets = identify(runs, cache, l, g, theta);
        split_to(sets, room, cache, l, g, a);
        dropped = drop_to(sets, room, a);
      } else if (room > 0 && candidates > 0) {
        // The largest threshold whose sets fit the room: more sets as theta rises, so bisect on it.
        double lo = config_.theta_floor, hi = 1.0;
        sets = identify(runs, cache, l, g, lo);
        if (static_cast<int>(sets.size()) <= room) {
          for (int step = 0; step < kThresholdSteps; ++step) {
            const double mid = 0.5 * (lo + hi);
            std::vector<MergeSet> trial = identify(runs, cache, l, g, mid);
            if (static_cast<int>(trial.size()) <= room) {
              lo = mid;
              sets = std::move(trial);
            } else {
              hi = mid;
            }
          }
        }
        theta = lo;
        split_to(sets, room, cache, l, g, a);
        dropped = drop_to(sets, room, a);
      } else {
        dropped = candidates;
      }
      if (room <= 0 || candidates <= 0) ++heads_without_room_;
    }
    thresholds_[static_cast<std::size_t>(l) * kv_heads_ + g] = theta;

    std::vector<char> keep_mask = conserved;
    for (const MergeSet& s : sets) {
      const int pivot = merge_into_pivot(s, cache, l, g, a, head);
      keep_mask[pivot] = 1;
    }
    for (int j = 0; j < n; ++j)
      if (keep_mask[j]) head.keep.push_back(j);

    diagnostics_.append_row(
        "kvmerger_heads",
        {static_cast<double>(l), static_cast<double>(g), static_cast<double>(n), static_cast<double>(recent),
         static_cast<double>(heavy), static_cast<double>(candidates), static_cast<double>(sets.size()), theta,
         static_cast<double>(dropped), static_cast<double>(head.keep.size())},
        "head", "field",
        "one row per (layer, kv_head) after prefill: layer, kv_head, entries n, recent kept, heavy "
        "hitters kept, merge candidates, merging sets, cosine threshold used, candidates evicted "
        "unmerged to meet the budget, entries kept");
    return head;
  }

  // Budget mode when the sets are fewer than the room: split single members off the ends of the
  // largest sets (ends keep every set contiguous), the end less similar to its pivot first, so the
  // cache holds exactly the budget.
  void split_to(std::vector<MergeSet>& sets, int room, const cache::KVCache& cache, int l, int g,
                const std::vector<double>& a) const {
    const int d = cache.head_dim();
    while (static_cast<int>(sets.size()) < room) {
      std::size_t largest = 0;
      for (std::size_t s = 1; s < sets.size(); ++s)
        if (sets[s].members.size() > sets[largest].members.size()) largest = s;
      MergeSet& s = sets[largest];
      if (s.members.size() < 2) return;
      const int pivot = pivot_of(s, a, l, g);
      const int first = s.members.front(), last = s.members.back();
      bool take_first;
      if (first == pivot)
        take_first = false;
      else if (last == pivot)
        take_first = true;
      else
        take_first = cosine(cache.key(l, g, first), cache.key(l, g, pivot), d) <=
                     cosine(cache.key(l, g, last), cache.key(l, g, pivot), d);
      MergeSet single;
      if (take_first) {
        single.members = {first};
        s.members.erase(s.members.begin());
        sets.insert(sets.begin() + static_cast<std::ptrdiff_t>(largest), std::move(single));
      } else {
        single.members = {last};
        s.members.pop_back();
        sets.insert(sets.begin() + static_cast<std::ptrdiff_t>(largest) + 1, std::move(single));
      }
    }
  }

  // Budget mode when even the loosest threshold leaves too many sets (stretches outnumber the room):
  // evict whole sets with the least summed attention (digest §2.8.3). Returns the entries that went.
  int drop_to(std::vector<MergeSet>& sets, int room, const std::vector<double>& a) const {
    const int excess = static_cast<int>(sets.size()) - room;
    if (excess <= 0) return 0;
    int dropped = 0;
    std::vector<double> mass(sets.size(), 0.0);
    for (std::size_t s = 0; s < sets.size(); ++s)
      for (int32_t i : sets[s].members) mass[s] += a[i];
    std::vector<std::size_t> order(sets.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return mass[x] < mass[y]; });
    std::vector<char> drop(sets.size(), 0);
    for (int i = 0; i < excess; ++i) drop[order[i]] = 1;
    std::vector<MergeSet> kept;
    for (std::size_t s = 0; s < sets.size(); ++s) {
      if (!drop[s])
        kept.push_back(std::move(sets[s]));
      else
        dropped += static_cast<int>(sets[s].members.size());
    }
    sets.swap(kept);
    return dropped;
  }

  // Eq. 6: the member with the most aggregated attention (the earlier one on a tie); or, for the Table 3
  // ablation, a member drawn uniformly, seeded by the set's place so that a run is reproducible.
  int pivot_of(const MergeSet& s, const std::vector<double>& a, int l, int g) const {
    if (config_.random_pivot) {
      std::seed_seq seed{config_.pivot_seed, static_cast<unsigned>(l), static_cast<unsigned>(g),
                         static_cast<unsigned>(s.members.front())};
      std::mt19937 rng(seed);
      return s.members[std::uniform_int_distribution<std::size_t>(0, s.members.size() - 1)(rng)];
    }
    int pivot = s.members.front();
    for (int32_t i : s.members)
      if (a[i] > a[pivot]) pivot = i;
    return pivot;
  }

  // Algorithm 2 for one set: Gaussian weights around the pivot (Eq. 7-8), K and V merged with the same
  // weights (Eq. 5); the merged entry takes the pivot's place and position. Returns the pivot.
  int merge_into_pivot(const MergeSet& s, const cache::KVCache& cache, int l, int g, const std::vector<double>& a,
                       cache::HeadEdit& head) {
    const int d = cache.head_dim();
    const int pivot = pivot_of(s, a, l, g);
    const float* kp = cache.key(l, g, pivot);
    const std::size_t m = s.members.size();
    std::vector<double> dist(m);
    double sum_dist = 0.0, sum_sq = 0.0;
    for (std::size_t i = 0; i < m; ++i) {
      dist[i] = distance(kp, cache.key(l, g, s.members[i]), d);
      sum_dist += dist[i];
      sum_sq += dist[i] * dist[i];
    }
    double sigma = 0.0;
    switch (config_.sigma_mode) {
      // The ablation's definition (§6.3, Table 5): mean L2 distance from the pivot to the other members.
      case SigmaMode::MeanDistance:
        sigma = m > 1 ? sum_dist / static_cast<double>(m - 1) : 0.0;
        break;
      // Eq. 7 as printed: sum of squared distances over sqrt(2)|S|.
      case SigmaMode::Eq7Literal:
        sigma = sum_sq / (std::sqrt(2.0) * static_cast<double>(m));
        break;
      case SigmaMode::Fixed:
        sigma = config_.sigma;
        break;
    }
    std::vector<double> gauss(m);
    double total = 0.0;
    for (std::size_t i = 0; i < m; ++i) {
      gauss[i] = kernels::gaussian_merge_weight(dist[i], sigma);  // Eq. 7
      total += gauss[i];
    }
    std::vector<float> weights(m);
    for (std::size_t i = 0; i < m; ++i) weights[i] = static_cast<float>(gauss[i] / total);  // Eq. 8
    // Table 4 ablation: every member weighs the same.
    if (config_.average_weights) std::fill(weights.begin(), weights.end(), 1.0f / static_cast<float>(m));

    if (m > 1) {
      cache::MergeGroup group;
      group.target = pivot;
      double check = 0.0;
      for (std::size_t i = 0; i < m; ++i)
        if (s.members[i] == pivot) group.weights.insert(group.weights.begin(), weights[i]);
      for (std::size_t i = 0; i < m; ++i)
        if (s.members[i] != pivot) {
          group.sources.push_back(s.members[i]);
          group.weights.push_back(weights[i]);
        }
      for (float w : group.weights) check += w;
      // Float rounding of the normalised weights: fold the residue into the pivot so they sum to 1.
      group.weights[0] += static_cast<float>(1.0 - check);
      head.merges.push_back(std::move(group));
    }
    record_set(s, cache, l, g, pivot, sigma, dist, weights);
    return pivot;
  }

  void record_set(const MergeSet& s, const cache::KVCache& cache, int l, int g, int pivot, double sigma,
                  const std::vector<double>& dist, const std::vector<float>& weights) {
    const int d = cache.head_dim();
    const auto positions = cache.positions(l, g);
    const std::size_t m = s.members.size();
    double pair_sum = 0.0;
    double min_to_pivot = 1.0;
    std::vector<double> to_pivot(m);
    for (std::size_t i = 0; i < m; ++i) {
      to_pivot[i] = cosine(cache.key(l, g, s.members[i]), cache.key(l, g, pivot), d);
      min_to_pivot = std::min(min_to_pivot, to_pivot[i]);
      for (std::size_t j = i + 1; j < m; ++j)
        pair_sum += cosine(cache.key(l, g, s.members[i]), cache.key(l, g, s.members[j]), d);
    }
    const double pairs = static_cast<double>(m * (m - 1) / 2);
    const double set_id = static_cast<double>(set_count_++);
    double pivot_weight = 1.0;
    for (std::size_t i = 0; i < m; ++i)
      if (s.members[i] == pivot) pivot_weight = weights[i];
    diagnostics_.append_row(
        "kvmerger_sets",
        {set_id, static_cast<double>(l), static_cast<double>(g), static_cast<double>(positions[s.members.front()]),
         static_cast<double>(positions[s.members.back()]), static_cast<double>(m),
         static_cast<double>(positions[pivot]), sigma, pivot_weight, pairs > 0 ? pair_sum / pairs : 1.0, min_to_pivot},
        "set", "field",
        "one row per merging set (Algorithm 1): set id, layer, kv_head, first position, last position, members, pivot "
        "position (Eq. 6), sigma (Eq. 7), pivot weight (Eq. 8), mean pairwise key cosine (Eq. 3), least key cosine to "
        "the pivot");
    if (m < 2) return;
    for (std::size_t i = 0; i < m; ++i)
      diagnostics_.append_row(
          "kvmerger_members",
          {set_id, static_cast<double>(positions[s.members[i]]), static_cast<double>(weights[i]), dist[i], to_pivot[i]},
          "member", "field",
          "one row per member of a multi-member set: set id, position, Gaussian weight (Eq. 8), "
          "L2 key distance to the pivot, key cosine to the pivot");
  }

  MergerConfig config_;
  int layers_ = 0, kv_heads_ = 0, group_ = 1, budget_ = 0, prompt_ = 0, seq_len_ = 0;
  std::vector<int> kept_after_prefill_;
  std::vector<double> thresholds_;  // [layer * kv_heads + head]: the threshold each head used
  int heads_without_room_ = 0, recent_tokens_ = 0, heavy_tokens_ = 0;
  long set_count_ = 0;
  long decode_merges_ = 0, decode_evictions_ = 0;
};

}  // namespace

PolicyInfo kvmerger_policy_info() {
  std::vector<ParamSpec> params = {
      ParamSpec::choice("mode", "budget", {"budget", "threshold"},
                        "budget: threshold searched per head so the cache meets the budget; threshold: the paper's "
                        "fixed theta, size adapts (§6.1)"),
      ParamSpec::choice("theta_search", "fixed", {"fixed", "bisect"},
                        "budget mode: keep the paper's `theta` and evict the sets with the least attention when they "
                        "do not fit (digest §2.8.3), or bisect the threshold per head in [theta_floor, 1] until the "
                        "sets fill the budget"),
      ParamSpec::real("theta_floor", -1.0, -1.0, 1.0,
                      "theta_search=bisect: the lowest threshold the search may reach (below it, sets are evicted)"),
      ParamSpec::real("theta", 0.75, -1.0, 1.0,
                      "cosine threshold of Algorithm 1 (§6.1: 0.75); threshold mode and "
                      "theta_search=fixed"),
      ParamSpec::choice("split", "budget", {"budget", "fixed"},
                        "recent and heavy-hitter shares: follow the budget through §6.1's two configurations (0.17 / "
                        "0.12 at 50%, 0.08 / 0.02 at 35%, linear between, proportional outside), or fixed at "
                        "recent_ratio / hh_ratio"),
      ParamSpec::real("recent_ratio", 0.17, 0.0, 1.0,
                      "split=fixed: share of the prompt kept as recent tokens (§6.1: 0.17 at 50%, 0.08 at 35%)"),
      ParamSpec::real("hh_ratio", 0.12, 0.0, 1.0,
                      "split=fixed: share kept as heavy hitters by Eq. 6 (§6.1: 0.12 at 50%, 0.02 at 35%)"),
      ParamSpec::choice("pivot", "attention", {"attention", "random"},
                        "pivot of a merging set: most attention, Eq. 6, or a random member (Table 3 ablation)"),
      ParamSpec::integer("pivot_seed", 0, 0, 1 << 30, "pivot=random: seed of the draws"),
      ParamSpec::choice("merge_weights", "gaussian", {"gaussian", "average"},
                        "merge weights: Gaussian kernel around the pivot (Eq. 7-8) or the plain average (Table 4 "
                        "ablation)"),
      ParamSpec::choice("sigma_mode", "mean_dist", {"mean_dist", "eq7", "fixed"},
                        "Gaussian width: mean L2 distance to the pivot (§6.3), Eq. 7 as printed, or `sigma`"),
      ParamSpec::real("sigma", 1.0, 1e-6, 1e6, "sigma when sigma_mode=fixed (Table 5 ablates 1, 3, 6)"),
      ParamSpec::choice("contiguity", "runs", {"runs", "list"},
                        "Algorithm 1 per stretch of consecutive candidates (runs) or over K_m as one list"),
      ParamSpec::choice("anchor", "latest", {"latest", "adjacent"},
                        "compare each key with the set's anchor (Algorithm 1) or with its neighbour"),
      ParamSpec::flag("decode_evict", false,
                      "protocol: one entry per decode step leaves so each head keeps its post-prompt size (CAKE §5 "
                      "runs every method so): the least Eq. 6 attention outside the recent tokens, merged into an "
                      "adjacent entry above theta (Algorithm 2 on the pair) or evicted; false appends (the paper)"),
  };
  return {"kvmerger",
          "keeps recent and heavy-hitter tokens and merges similar neighbouring keys into pivot-weighted entries",
          "KVMerger: adaptive KV cache merging for LLMs on long-context tasks (ICLR submission)", params,
          [](const PolicyParams& p) {
            MergerConfig c;
            c.budget_mode = p.get_choice("mode") == "budget";
            c.search_theta = p.get_choice("theta_search") == "bisect";
            c.theta = p.get_float("theta");
            c.theta_floor = p.get_float("theta_floor");
            c.split_follows_budget = p.get_choice("split") == "budget";
            c.random_pivot = p.get_choice("pivot") == "random";
            c.pivot_seed = static_cast<unsigned>(p.get_int("pivot_seed"));
            c.average_weights = p.get_choice("merge_weights") == "average";
            c.recent_ratio = p.get_float("recent_ratio");
            c.hh_ratio = p.get_float("hh_ratio");
            const std::string& sigma = p.get_choice("sigma_mode");
            c.sigma_mode = sigma == "mean_dist" ? SigmaMode::MeanDistance
                           : sigma == "eq7"     ? SigmaMode::Eq7Literal
                                                : SigmaMode::Fixed;
            c.sigma = p.get_float("sigma");
            c.split_at_gaps = p.get_choice("contiguity") == "runs";
            c.anchor_latest = p.get_choice("anchor") == "latest";
            c.decode_evict = p.get_bool("decode_evict");
            return std::make_unique<KVMergerPolicy>(c);
          }};
}

}  // namespace kvscope::policy
