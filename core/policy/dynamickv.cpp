// DynamicKV: task-aware adaptive KV cache compression (Zhou et al., arXiv 2412.14838; Algorithm 1 and the
// official code). During prefill each layer scores its prompt keys by the pooled attention of the last ws
// prompt tokens (eq. 1) and keeps a buffer of its top bs = r_max * (wt - ws) keys plus the window (eqs.
// 2-4). Every m layers a global top-k over the scores of all layers so far re-allocates the per-layer
// budgets (eqs. 5-8) and truncates the earlier buffers, which only ever shrink. Decoding appends freely, or
// with decode_evict (CAKE §5's protocol) evicts one entry per step by the new query's pooled attention.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/common/error.h"
#include "core/policy/allocation_dynamickv.h"
#include "core/policy/allocation_report.h"
#include "core/policy/catalog.h"
#include "core/policy/policy_layers.h"
#include "core/policy/selection.h"

namespace kvscope::policy {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<ParamSpec> dynamickv_params() {
  // Shared with the dynamickv allocation; a doc of its own lists these under the policy too.
  std::vector<ParamSpec> specs = dynamickv::score_params();
  for (auto& spec : specs) spec.doc = "scores and budgets: " + spec.doc;
  specs.push_back(ParamSpec::integer("interval", 4, 1, 1 << 16,
                                     "m: layers between budget updates (Alg. 1 line 24) [code: 4]; the last layer "
                                     "always updates (spec B6-4)"));
  specs.push_back(ParamSpec::flag("refill", false,
                                  "give budget a shrunken buffer cannot take back to layers that still hold spare "
                                  "entries at the last update (spec B6-3 option; off = the code's behaviour)"));
  specs.push_back(
      ParamSpec::flag("decode_evict", false,
                      "protocol: evict one entry per decode step so every layer stays at its budget "
                      "(CAKE §5 runs every method so), scored by the new query's pooled attention (eq. 1 "
                      "with a window of one row), the last `window` entries kept; false appends (the paper)"));
  return specs;
}

class DynamicKVPolicy final : public Policy {
 public:
  explicit DynamicKVPolicy(const PolicyParams& params)
      : settings_(dynamickv::score_settings(params)),
        interval_(params.get_int("interval")),
        refill_(params.get_bool("refill")),
        decode_evict_(params.get_bool("decode_evict")) {}

  std::string name() const override { return "dynamickv"; }

  ObservationRequest request(int, Phase phase) const override {
    ObservationRequest r;
    if (phase == Phase::Prefill ? !compress_ : !decode_evict_) return r;
    r.window = std::max(window_, 1);
    r.window_rows = true;
    return r;
  }

  void begin(const RunInfo& info) override {
    // Slots, not model layers: under swa=skip|window the budget is shared by the global layers alone.
    decided_ = PolicyLayers(info.config, swa_mode());
    layers_ = decided_.size();
    kv_heads_ = info.config.n_kv_heads;
    prompt_length_ = info.prompt_length;
    const int wt = info.budget > 0 ? info.budget : info.prompt_length;
    // Spec B6-7: a prompt that fits the budget stays whole.
    compress_ = prompt_length_ > wt;
    // A budget no larger than the window keeps the window alone (base 0).
    window_ = std::min(settings_.window, wt);
    base_ = wt - window_;
    scored_ = std::max(0, prompt_length_ - window_);
    // Eq. 2, capped by the keys there are [code: bs = min(int(r_max * base), n - ws)].
    buffer_ = std::min(static_cast<int>(settings_.r_max * base_), scored_);
    scores_.assign(layers_, {});
    lengths_.assign(layers_, 0);
    seen_ = 0;
    diagnostics_ = Diagnostics{};
    diagnostics_.set_setting("decode_evict", decode_evict_ ? "true" : "false");
    diagnostics_.set("sizes", Series{{double(wt), double(window_), double(base_), double(buffer_)},
                                     {4},
                                     {"quantity"},
                                     "wt (average tokens per layer and KV head incl. window), ws, wt - ws, and the "
                                     "buffer bs = min(r_max * (wt - ws), n - ws) of eq. 2"});
  }

  cache::CacheEdit after_layer(const AttentionObservation& obs, cache::KVCache& cache) override {
    if (obs.phase == Phase::Decode) return decode_evict_ ? evict_decode(obs, cache) : cache::CacheEdit{};
    if (!compress_) return {};
    const int layer = decided_.slot(obs.layer);
    if (layer != seen_)
      throw Error("dynamickv: saw layer " + std::to_string(obs.layer) + ", expected " +
                  (seen_ < layers_ ? std::to_string(decided_.layer(seen_)) : std::string("no further layer")));
    for (int g = 0; g < kv_heads_; ++g)
      if (obs.n_keys[g] != prompt_length_)
        throw Error("dynamickv: layer " + std::to_string(obs.layer) + " kv head " + std::to_string(g) + " holds " +
                    std::to_string(obs.n_keys[g]) + " entries, expected the whole prompt of " +
                    std::to_string(prompt_length_) + " (DynamicKV compresses one exact prefill pass)");
    scores_[layer].resize(kv_heads_);
    for (int g = 0; g < kv_heads_; ++g)
      scores_[layer][g] = dynamickv::window_scores(obs, g, window_, settings_.kernel, settings_.pooling, settings_.reduce);
    // Eqs. 3-4: the layer's buffer, its top-bs keys per head plus the window.
    lengths_[layer] = buffer_;
    seen_ = layer + 1;
    std::vector<int> before(lengths_);
    before[layer] = scored_;  // the cache still holds the whole prompt in this layer
    if ((layer + 1) % interval_ == 0 || layer == layers_ - 1) update(layer);

    cache::CacheEdit edit;
    for (int i = 0; i <= layer; ++i)
      if (lengths_[i] < before[i])
        for (int g = 0; g < kv_heads_; ++g) edit.heads.push_back(truncate(i, g, cache));
    return edit;
  }

  cache::CacheEdit after_step(const StepInfo&, cache::KVCache&) override { return {}; }

  int expected_length(int model_layer, int, const StepInfo& step) const override {
    const int layer = decided_.slot(model_layer);
    if (layer < 0 || (compress_ && seen_ < layers_)) return -1;
    const int held = compress_ ? lengths_[layer] + window_ + (step.seq_len - prompt_length_) : step.seq_len;
    return decode_evict_ ? std::min(held, layer_budget(layer)) : held;
  }

  std::vector<int> layer_budgets() const override {
    std::vector<int> out(layers_);
    for (int l = 0; l < layers_; ++l) out[l] = compress_ ? layer_budget(l) : prompt_length_;
    return decided_.to_model_layers(out, prompt_length_);
  }

 private:
  // What a layer holds after the prompt: its buffer plus the window, or the average budget wt when the
  // prompt fitted it (decode eviction then lets the cache grow to wt and holds it there).
  int layer_budget(int layer) const { return compress_ ? lengths_[layer] + window_ : base_ + window_; }

  // CAKE's protocol for DynamicKV (not in the paper, which appends): each decode step scores the entries
  // by eq. 1 with the step's one query as the window, pooled over every entry but the newest, keeps the
  // last `window` entries and evicts the lowest down to the layer's budget.
  cache::CacheEdit evict_decode(const AttentionObservation& obs, cache::KVCache& cache) const {
    cache::CacheEdit edit;
    const int budget = layer_budget(decided_.slot(obs.layer));
    for (int g = 0; g < kv_heads_; ++g) {
      if (cache.size(obs.layer, g) <= budget) continue;
      std::vector<float> s = dynamickv::window_scores(obs, g, 1, settings_.kernel, settings_.pooling, settings_.reduce);
      s.push_back(std::numeric_limits<float>::infinity());  // the newest entry, kept as part of the window
      std::vector<int32_t> keep = keep_top_scores(s, budget, 0, window_);
      edit.heads.push_back(keep_edit(obs.layer, g, std::move(keep), std::move(s)));
    }
    return edit;
  }

  // Alg. 1 Update_Buffer_Length over layers 0..layer, then lines 27-29: every buffer is cut to its budget.
  void update(int layer) {
    const int seen = layer + 1;
    std::vector<std::vector<std::vector<float>>> sofar(scores_.begin(), scores_.begin() + seen);
    // Eq. 5: k = (wt - ws) * H * l' winners over all heads and keys of the layers so far.
    const std::vector<long> counts = dynamickv::winner_counts(sofar, static_cast<long>(base_) * kv_heads_ * seen);
    // Eqs. 6-8: budgets normalised to the whole model's (wt - ws) * L.
    const std::vector<int> allocation =
        dynamickv::normalised_budgets(counts, buffer_, static_cast<long>(base_) * layers_, settings_.code_arithmetic);
    std::vector<int> previous(lengths_.begin(), lengths_.begin() + seen);
    // A buffer cannot grow back: what it lost is gone from the cache (spec B6-3, without the code's
    // duplicated window rows).
    for (int i = 0; i < seen; ++i) lengths_[i] = std::clamp(allocation[i], 0, std::min(previous[i], scored_));
    if (refill_ && layer == layers_ - 1) refill(allocation, previous);

    const int model_layers = decided_.model_layers();
    std::vector<double> count_row(model_layers, kNaN), allocation_row(model_layers, kNaN), length_row(model_layers, kNaN);
    for (int i = 0; i < seen; ++i) {
      count_row[decided_.layer(i)] = static_cast<double>(counts[i]);
      allocation_row[decided_.layer(i)] = allocation[i];
      length_row[decided_.layer(i)] = lengths_[i];
    }
    diagnostics_.append_row("update_layers", {static_cast<double>(seen)}, "update", "value",
                            "l', the number of layers the update covered (every m layers and the last)");
    diagnostics_.append_row("winner_counts", count_row, "update", "layer",
                            "winners of the global top-(wt-ws)*H*l' per layer (eq. 5); NaN for layers not yet seen");
    diagnostics_.append_row("allocation", allocation_row, "update", "layer",
                            "BL_i of eqs. 6-8, normalised to (wt-ws)*L over the layers seen");
    diagnostics_.append_row("buffer_length", length_row, "update", "layer",
                            "tokens kept per KV head besides the window after the update: min(BL_i, previous length)");
    if (layer == layers_ - 1) {
      std::vector<int> held(layers_);
      for (int l = 0; l < layers_; ++l) held[l] = lengths_[l] + window_;
      const std::vector<int> model_held = decided_.to_model_layers(held, -1);
      std::vector<double> final_budget(model_held.begin(), model_held.end());
      for (double& v : final_budget)
        if (v < 0) v = kNaN;  // a sliding-window layer DynamicKV leaves to its window
      diagnostics_.set("final_budget", Series{final_budget, {model_layers}, {"layer"},
                                              "prompt tokens kept per KV head, window included (eq. 4 after the last update)"});
      report_layer_budgets(decided_.to_model_layers(held, prompt_length_), prompt_length_, base_ + window_, window_,
                           "policy 'dynamickv'", diagnostics_, &decided_);
    }
  }

  // Budget a layer could not take (its buffer had shrunk below BL_i) goes to the layers that still hold
  // more entries than BL_i, in proportion to BL_i, up to what they hold.
  void refill(const std::vector<int>& allocation, const std::vector<int>& previous) {
    long lost = static_cast<long>(base_) * layers_;
    for (int l = 0; l < layers_; ++l) lost -= lengths_[l];
    while (lost > 0) {
      double weight = 0.0;
      for (int l = 0; l < layers_; ++l)
        if (lengths_[l] < previous[l]) weight += std::max(allocation[l], 1);
      if (weight == 0.0) break;
      long given = 0;
      for (int l = 0; l < layers_ && given < lost; ++l) {
        if (lengths_[l] >= previous[l]) continue;
        const long share = std::max(1L, static_cast<long>(std::floor(lost * std::max(allocation[l], 1) / weight)));
        const long add = std::min({share, static_cast<long>(previous[l] - lengths_[l]), lost - given});
        lengths_[l] += static_cast<int>(add);
        given += add;
      }
      lost -= given;
    }
  }

  // The edit that cuts (layer, kv_head) to its top lengths_[layer] prompt keys plus the window. The cache
  // holds a superset (buffers only shrink), in position order, so entries are found by position.
  cache::HeadEdit truncate(int layer, int kv_head, const cache::KVCache& cache) const {
    const std::vector<float>& scores = scores_[layer][kv_head];
    std::vector<char> wanted(prompt_length_, 0);
    for (int32_t j : keep_top_scores(scores, lengths_[layer], 0, 0)) wanted[j] = 1;
    for (int j = scored_; j < prompt_length_; ++j) wanted[j] = 1;
    const auto positions = cache.positions(decided_.layer(layer), kv_head);
    std::vector<int32_t> keep;
    std::vector<float> entry_scores(positions.size());
    for (std::size_t e = 0; e < positions.size(); ++e) {
      const int32_t p = positions[e];
      if (wanted[p]) keep.push_back(static_cast<int32_t>(e));
      // The window is kept unranked; +inf says so in the recorded scores.
      entry_scores[e] = p < scored_ ? scores[p] : std::numeric_limits<float>::infinity();
    }
    if (static_cast<int>(keep.size()) != lengths_[layer] + (prompt_length_ - scored_))
      throw Error("dynamickv: layer " + std::to_string(decided_.layer(layer)) + " kv head " + std::to_string(kv_head) +
                  " lost entries its budget still wants (internal error)");
    return keep_edit(decided_.layer(layer), kv_head, std::move(keep), std::move(entry_scores));
  }

  dynamickv::ScoreSettings settings_;
  int interval_ = 4;
  bool refill_ = false;
  bool decode_evict_ = false;
  PolicyLayers decided_;  // the layers the budget is spread over; everything below is indexed by their slot
  int layers_ = 0, kv_heads_ = 0, prompt_length_ = 0;
  bool compress_ = false;
  int window_ = 0, base_ = 0, scored_ = 0, buffer_ = 0;
  std::vector<std::vector<std::vector<float>>> scores_;  // [layer][kv_head][scored_]: pooled eq.-1 scores
  std::vector<int> lengths_;                              // len_l: buffer entries besides the window
  int seen_ = 0;
};

}  // namespace

PolicyInfo dynamickv_policy_info() {
  return {"dynamickv",
          "SnapKV-style window scores; layer budgets re-allocated every m layers by a global top-k during prefill",
          "Zhou et al., DynamicKV: Task-Aware Adaptive KV Cache Compression for Long Context LLMs (arXiv 2412.14838)",
          dynamickv_params(), [](const PolicyParams& p) { return std::make_unique<DynamicKVPolicy>(p); }};
}

}  // namespace kvscope::policy
