#include "core/policy/scored_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "core/common/error.h"
#include "core/policy/allocation_catalog.h"
#include "core/policy/allocation_report.h"
#include "core/policy/block_scoring.h"
#include "core/policy/compose_subset.h"
#include "core/policy/selection.h"
#include "kernels/common/dequantize.h"

namespace kvscope::policy {

std::vector<ParamSpec> scored_policy_params(std::vector<ParamSpec> own, const Protocol& protocol_defaults,
                                            const std::string& default_allocation) {
  for (auto& spec : protocol_params(protocol_defaults)) own.push_back(std::move(spec));
  std::string names;
  for (const auto& n : allocation_names()) names += (names.empty() ? "" : ", ") + n;
  own.push_back(ParamSpec::choice("allocation", default_allocation, allocation_names(),
                                  "how the budget is spread over layers (" + names +
                                      "); the average stays the budget (per_layer: each layer its own ratio). See docs/policies.md, Allocations"));
  for (const auto& info : all_allocations())
    for (const auto& spec : info.params) {
      const bool declared =
          std::any_of(own.begin(), own.end(), [&](const ParamSpec& s) { return s.name == spec.name; });
      if (!declared) own.push_back(spec);
    }
  own.push_back(ParamSpec::choice(
      "selection", "topk", {"topk", "adakv", "chunkkv", "criticalkv", "criticaladakv", "chunk", "entropy_chunkkv"},
      "how the kept entries are picked from the scores: each KV head its own top budget (topk); AdaKV (Feng et al. "
      "2024, kvpress AdaKVPress): heads x budget entries by score across the layer's heads, each head keeping at "
      "least alpha_safeguard x budget; ChunkKV (Liu et al. 2025, kvpress ChunkKVPress): whole chunks of "
      "chunk_length entries by their mean score summed over heads, the same for every head; CriticalKV (Feng et al. "
      "2025, kvpress CriticalKVPress): first_stage_ratio of the budget by score, the rest by (score + "
      "critical_epsilon) x |W_o v|_1; criticaladakv (kvpress CriticalAdaKVPress): AdaKV's head budgets, each head "
      "filled as CriticalKV; chunk (kvpress ChunkPress): each chunk of chunk_length entries scored on its own and "
      "keeping its own share (1 - R) of its best, per head; entropy_chunkkv (kvpress EntropyGatedChunkKVPress): "
      "ChunkKV's chunks, a high-scoring chunk of low score entropy reduced to its low_entropy_chunk_length best. See "
      "docs/policies.md, Selection"));
  own.push_back(ParamSpec::real("alpha_safeguard", 0.2, 0.0, 1.0,
                                "selection=adakv or criticaladakv: share of the budget each head keeps of its own "
                                "best entries whatever the other heads score (kvpress: 0.20)"));
  own.push_back(
      ParamSpec::integer("chunk_length", 20, 1, 1 << 20,
                         "selection=chunkkv, chunk or entropy_chunkkv: entries per chunk, counted from the first "
                         "(kvpress: 20 for ChunkKVPress, 1024 for ChunkPress, 10 for "
                         "EntropyGatedChunkKVPress)"));
  own.push_back(ParamSpec::integer("low_entropy_chunk_length", 4, 1, 1 << 20,
                                   "selection=entropy_chunkkv: entries kept of a high-scoring chunk whose scores have "
                                   "low entropy (kvpress: 4); below chunk_length"));
  own.push_back(ParamSpec::real("first_stage_ratio", 0.5, 0.0, 1.0,
                                "selection=criticalkv or criticaladakv: share of the kept entries chosen by the score "
                                "alone (kvpress: 0.5)"));
  own.push_back(ParamSpec::real("critical_epsilon", 1e-4, 0.0, 1e6,
                                "selection=criticalkv or criticaladakv: added to the score before it is scaled by "
                                "|W_o v|_1 (kvpress epsilon: 1e-4)"));
  return own;
}

namespace {
// Each selection's own parameters and the selections they belong to (the first is named in messages).
const std::vector<std::pair<std::string, std::vector<std::string>>>& selection_params() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> table = {
      {"alpha_safeguard", {"adakv", "criticaladakv"}},
      {"chunk_length", {"chunkkv", "chunk", "entropy_chunkkv"}},
      {"low_entropy_chunk_length", {"entropy_chunkkv"}},
      {"first_stage_ratio", {"criticalkv", "criticaladakv"}},
      {"critical_epsilon", {"criticalkv", "criticaladakv"}}};
  return table;
}
}  // namespace

bool is_selection_param(const std::string& name) {
  if (name == "selection") return true;
  for (const auto& [param, owners] : selection_params())
    if (param == name) return true;
  return false;
}

void drop_unchosen_allocation_params(const std::string& policy, const std::vector<ParamSpec>& specs,
                                     PolicyParams& params) {
  if (params.has("selection")) {
    const std::string& chosen = params.get_choice("selection");
    for (const auto& [name, owners] : selection_params()) {
      if (std::find(owners.begin(), owners.end(), chosen) != owners.end() || !params.has(name)) continue;
      if (params.given(name)) {
        std::string names;
        for (const auto& o : owners) names += (names.empty() ? "selection=" : " or ") + o;
        throw UsageError("policy '" + policy + "' parameter '" + name + "' belongs to " + names +
                         " (this spec has selection=" + chosen + "); add selection=" + owners.front() +
                         " or leave it out");
      }
      params.erase(name);
    }
  }
  if (!params.has("allocation")) return;
  const std::string& chosen = params.get_choice("allocation");
  for (const auto& spec : specs) {
    const auto owners = allocations_declaring(spec);
    if (owners.empty() || std::find(owners.begin(), owners.end(), chosen) != owners.end()) continue;
    if (params.given(spec.name)) {
      std::string names;
      for (const auto& o : owners) names += (names.empty() ? "" : " or ") + o;
      throw UsageError("policy '" + policy + "' parameter '" + spec.name + "' belongs to allocation " + names +
                       ", which this spec does not choose (allocation=" + chosen +
                       "); add allocation=" + owners.front() + " or leave '" + spec.name + "' out");
    }
    params.erase(spec.name);
  }
}

ScoredPolicy::ScoredPolicy(std::string name, const PolicyParams& params)
    : name_(std::move(name)),
      protocol_(protocol_of(params)),
      params_(params),
      allocation_name_(params.get_choice("allocation")),
      selection_(!params.has("selection")                              ? Selection::TopK
                 : params.get_choice("selection") == "adakv"           ? Selection::AdaKV
                 : params.get_choice("selection") == "chunkkv"         ? Selection::ChunkKV
                 : params.get_choice("selection") == "criticalkv"      ? Selection::CriticalKV
                 : params.get_choice("selection") == "criticaladakv"   ? Selection::CriticalAdaKV
                 : params.get_choice("selection") == "chunk"           ? Selection::Chunk
                 : params.get_choice("selection") == "entropy_chunkkv" ? Selection::EntropyChunkKV
                                                                       : Selection::TopK),
      alpha_safeguard_(head_adaptive() ? params.get_float("alpha_safeguard") : 0.0),
      chunk_length_(selection_ == Selection::ChunkKV || selection_ == Selection::Chunk ||
                            selection_ == Selection::EntropyChunkKV
                        ? params.get_int("chunk_length")
                        : 0),
      low_entropy_chunk_length_(selection_ == Selection::EntropyChunkKV ? params.get_int("low_entropy_chunk_length")
                                                                        : 0),
      first_stage_ratio_(output_aware() ? params.get_float("first_stage_ratio") : 0.0),
      critical_epsilon_(output_aware() ? params.get_float("critical_epsilon") : 0.0) {
  if (protocol_.block_scoring > 0 && selection_ != Selection::TopK)
    throw UsageError("policy '" + name_ + "': block_scoring needs selection=topk (kvpress's BlockPress wraps a "
                     "scorer press)");
  if (selection_ == Selection::EntropyChunkKV && low_entropy_chunk_length_ >= chunk_length_)
    throw UsageError("policy '" + name_ + "' selection=entropy_chunkkv: low_entropy_chunk_length=" +
                     std::to_string(low_entropy_chunk_length_) + " must be below chunk_length=" +
                     std::to_string(chunk_length_) + " (kvpress EntropyGatedChunkKVPress)");
  if (selection_ == Selection::Chunk && (protocol_.block > 0 || protocol_.decode_evict))
    throw UsageError("policy '" + name_ + "' selection=chunk scores the chunks of a one-pass prefill, as kvpress's "
                     "ChunkPress compresses the prefill: use block=0 and decode_evict=false");
  // Built once here so that a bad allocation parameter fails when the policy is made, not mid-run.
  allocation_ = make_allocation(allocation_name_, params_);
}

void ScoredPolicy::chain(std::unique_ptr<ScoredPolicy> then, double then_ratio) {
  if (selection_ != Selection::TopK || (then && then->selection_ != Selection::TopK))
    throw UsageError("compose: both policies must select per head (selection=topk); kvpress's ComposedPress does not "
                     "take AdaKV either");
  if (then_) throw UsageError("compose: policy '" + name_ + "' is already composed with another");
  if (protocol_.block_scoring > 0) throw UsageError("compose: policy '" + name_ + "' scores in blocks (block_scoring)");
  then_ = std::move(then);
  then_ratio_ = then_ratio;
  then_reads_attention_ = then_ && then_->scorer_reads_attention();
}

std::unique_ptr<LayerAllocation> ScoredPolicy::make_layer_allocation() const {
  return make_allocation(params_.get_choice("allocation"), params_);
}

ObservationRequest ScoredPolicy::request(int layer, Phase phase) const {
  // Without decode eviction nothing reads decode attention (an accumulated score no longer matters), and without
  // prefill eviction (prefill_evict=false) nothing but the allocation reads the prefill's, which can then be shared.
  const bool scores = phase == Phase::Prefill ? protocol_.prefill_evict : protocol_.decode_evict;
  ObservationRequest r = scores ? scorer_request(phase) : ObservationRequest{};
  if (phase == Phase::Prefill && allocation_) r.merge(allocation_->request(layer));
  if (then_ && scores) {
    ObservationRequest t = then_->scorer_request(phase);
    if (then_reads_attention_) {
      // Its attention is recomputed over the first's entries from the queries (compose_subset.h): the engine's own
      // reductions, over every entry, are not asked for (nor would the first's window widen to the second's).
      t.window = 0;
      t.column_sums = t.window_sums = t.window_rows = t.last_row = t.log_sum_exp = t.rows = false;
      t.queries = true;
    }
    r.merge(t);
  }
  return r;
}

bool ScoredPolicy::scorer_reads_attention() const {
  const ObservationRequest r = scorer_request(Phase::Prefill);
  return r.column_sums || r.window_sums || r.window_rows || r.last_row || r.log_sum_exp;
}

void ScoredPolicy::begin(const RunInfo& info) {
  if (protocol_.block_scoring > 0 && scorer_reads_attention())
    throw UsageError("policy '" + name_ + "' reads attention, which block_scoring's subsets of the prompt do not have "
                     "(kvpress's BlockPress refuses attention weights); score from keys, values or hidden states");
  if (selection_ == Selection::Chunk && scorer_reads_attention())
    throw UsageError("policy '" + name_ + "' reads attention, which selection=chunk's chunks of the prompt do not have "
                     "(kvpress's ChunkPress refuses attention weights); score from keys, values or hidden states");
  run_ = info;
  const int layers = info.config.n_layers, heads = info.config.n_kv_heads;
  allocation_ = make_layer_allocation();  // a fresh one: adaptive allocations keep state
  allocation_name_ = allocation_->name();
  budgets_.assign(layers, info.budget);
  // per_layer's ratios name model layers; every other allocation spreads the budget over the layers this
  // policy decides.
  allocated_layers_ = PolicyLayers(info.config, allocation_->sets_own_budgets() ? SwaMode::Compress : swa_mode());
  budgets_final_ = false;
  pending_.assign(layers, std::vector<std::vector<float>>(heads));
  decode_rows_.reset(layers, protocol_.decode_buffer);
  block_obs_.assign(layers, std::nullopt);
  expected_.assign(static_cast<std::size_t>(layers) * heads, 0);
  output_projection_.assign(layers, {});
  expected_seq_len_ = 0;
  started_ = false;
  diagnostics_ = Diagnostics();
  publish_protocol(protocol_, info.budget, "policy '" + name_ + "'", diagnostics_);
  diagnostics_.set_setting("allocation", "\"" + allocation_name_ + "\"");
  on_begin(info);
  if (then_) {
    then_->begin(info);
    then_pending_.assign(layers, std::vector<std::vector<float>>(heads));
    then_obs_.assign(layers, std::nullopt);
    then_counts_.assign(static_cast<std::size_t>(layers) * heads, -1);
  }
}

bool ScoredPolicy::is_final_prefill(const AttentionObservation& obs) const {
  return obs.phase == Phase::Prefill && !obs.query_positions.empty() &&
         obs.query_positions.back() + 1 == run_.prompt_length;
}

cache::CacheEdit ScoredPolicy::after_layer(const AttentionObservation& obs, cache::KVCache& cache) {
  if (obs.layer < 0 || obs.layer >= static_cast<int>(pending_.size()))
    throw Error("policy '" + name_ + "' saw layer " + std::to_string(obs.layer) + " but begin() set up " +
                std::to_string(pending_.size()) + " layers");
  const bool final_prefill = is_final_prefill(obs);
  if (final_prefill)
    allocation_->observe(allocated_layers_.every_layer() ? obs : allocated_layers_.renumbered(obs));
  const bool evicts = protocol_.evicts_in(obs.phase, obs.phase == Phase::Decode || final_prefill, obs.step);
  // kvpress DecodingPress scores the decode steps since its last compression: their rows are buffered.
  std::optional<AttentionObservation> buffered;
  if (obs.phase == Phase::Decode && protocol_.decode_interval > 1 && DecodeRowBuffer::carries_rows(obs)) {
    decode_rows_.append(obs);
    if (!evicts) decode_rows_.trim(obs.layer);
    else buffered.emplace(decode_rows_.take(obs));
  }
  if (!evicts) return {};
  // scored block by block (or chunk by chunk) once the budgets are known
  if (final_prefill && (protocol_.block_scoring > 0 || selection_ == Selection::Chunk)) {
    block_obs_[obs.layer] = obs;
    return {};
  }
  const AttentionObservation& seen = buffered ? *buffered : obs;
  for (int h = 0; h < obs.n_kv_heads; ++h) {
    std::vector<float> s = score(seen, h, cache);
    if (!s.empty() && static_cast<int>(s.size()) != cache.size(obs.layer, h))
      throw Error("policy '" + name_ + "' scored " + std::to_string(s.size()) + " entries of layer " +
                  std::to_string(obs.layer) + " kv head " + std::to_string(h) + ", which holds " +
                  std::to_string(cache.size(obs.layer, h)));
    pending_[obs.layer][h] = std::move(s);
    if (!then_ || then_reads_attention_) continue;
    std::vector<float> t = then_->score(seen, h, cache);
    if (!t.empty() && static_cast<int>(t.size()) != cache.size(obs.layer, h))
      throw Error("policy '" + then_->name_ + "' (compose's second) scored " + std::to_string(t.size()) +
                  " entries of layer " + std::to_string(obs.layer) + " kv head " + std::to_string(h) + ", which holds " +
                  std::to_string(cache.size(obs.layer, h)));
    then_pending_[obs.layer][h] = std::move(t);
  }
  if (then_reads_attention_) then_obs_[obs.layer] = seen;  // scored on the first's entries once they are chosen
  // Otherwise evicting waits for after_step: no later layer of this step reads this layer's cache, so the
  // result is the same, and adaptive allocations need every layer's observation first.
  cache::CacheEdit edit;
  if (!protocol_.trims_before_output(obs.phase)) return edit;
  if (final_prefill && !budgets_final_) {
    if (allocation_->request(obs.layer).any()) {
      diagnostics_.warn("policy '" + name_ + "': trim=before_output, but allocation '" + allocation_name_ +
                        "' reads every layer's attention before it sets budgets, so the last prefill block "
                        "evicts after its output");
      return edit;
    }
    finalize_budgets(obs.query_positions.back() + 1);
  }
  evict_layer(obs.layer, cache, edit);
  return edit;
}

void ScoredPolicy::finalize_budgets(int seq_len) {
  budgets_final_ = true;
  const int layers = static_cast<int>(budgets_.size());
  // A budget that holds the whole prompt needs no allocation: nothing is evicted until the cache grows
  // past it, and a reshaped budget would evict in decode what the user's budget allows. An allocation that sets
  // its own budgets (per_layer's ratios) is not bound by the run's.
  if (run_.budget < seq_len || allocation_->sets_own_budgets()) {
    allocation_->set_reserved(reserved());
    allocation_->set_compression_ratio(run_.compression_ratio);
    const int allocated = allocated_layers_.size();
    std::vector<int> b = allocation_->budgets(allocated, run_.budget, seq_len);
    if (static_cast<int>(b.size()) != allocated)
      throw Error("allocation '" + allocation_name_ + "' gave " + std::to_string(b.size()) + " budgets for " +
                  std::to_string(allocated) + " layers");
    for (int& v : b) v = std::max(v, 1);
    // A sliding-window layer the policy leaves alone keeps the run's budget as its (unused) number.
    budgets_ = allocated_layers_.to_model_layers(b, run_.budget);
    Diagnostics published;
    allocation_->publish(published);
    allocated_layers_.publish_to_model_layers(published, diagnostics_);
  }
  diagnostics_.set("layer_budgets", {std::vector<double>(budgets_.begin(), budgets_.end()),
                                     {layers},
                                     {"layer"},
                                     "tokens each KV head of a layer keeps (allocation " + allocation_name_ +
                                         (allocation_->sets_own_budgets()
                                              ? ", its own per layer"
                                              : ", average " + std::to_string(run_.budget)) +
                                         ")"});
  report_layer_budgets(budgets_, seq_len, run_.budget, reserved(),
                       "policy '" + name_ + "', allocation '" + allocation_name_ + "'", diagnostics_, &allocated_layers_);
}

std::vector<double> ScoredPolicy::rank_scores(int, int, std::span<const float> scores) {
  return {scores.begin(), scores.end()};
}

void ScoredPolicy::evict_layer(int layer, cache::KVCache& cache, cache::CacheEdit& edit) {
  if (head_adaptive()) return evict_layer_adakv(layer, cache, edit);
  if (selection_ == Selection::ChunkKV || selection_ == Selection::EntropyChunkKV)
    return evict_layer_chunks(layer, cache, edit);
  if (selection_ == Selection::CriticalKV) return evict_layer_critical(layer, cache, edit);
  if (selection_ == Selection::Chunk) return evict_layer_chunk_scored(layer, cache, edit);
  evict_layer_topk(layer, cache, edit);
}

SubsetRanking ScoredPolicy::subset_ranking() {
  return [this](const AttentionObservation& sub, int kv_head, cache::KVCache& c) {
    // A scorer may score every head at its head 0 (a Python file does): the call for kv_head then reads c's.
    if (kv_head != 0) score(sub, 0, c);
    std::vector<float> s = score(sub, kv_head, c);
    return s.empty() ? std::vector<double>(c.size(sub.layer, kv_head), 0.0) : rank_scores(sub.layer, kv_head, s);
  };
}

void ScoredPolicy::evict_layer_chunk_scored(int layer, cache::KVCache& cache, cache::CacheEdit& edit) {
  const int heads = cache.n_kv_heads(), budget = budgets_[layer], n = cache.size(layer, 0);
  for (int h = 0; h < heads; ++h) expected_[static_cast<std::size_t>(layer) * heads + h] = cache.size(layer, h);
  if (n <= budget) return;  // kvpress: a compression ratio of 0 keeps everything
  if (!block_obs_[layer])
    throw Error("policy '" + name_ + "' selection=chunk: layer " + std::to_string(layer) +
                " evicts without its one-pass prefill observation");
  const std::vector<std::vector<int32_t>> keep =
      chunk_scored_keep(*block_obs_[layer], cache, chunk_length_, kept_share(layer, budget, n), subset_ranking());
  for (int h = 0; h < heads; ++h) {
    // The promise is the chunks' own counts, sum_c max(1, int(len_c (1 - R))), not the layer's budget.
    expected_[static_cast<std::size_t>(layer) * heads + h] = static_cast<int>(keep[h].size());
    if (static_cast<int>(keep[h].size()) >= cache.size(layer, h)) continue;
    edit.heads.push_back(keep_edit(layer, h, keep[h], {}));
    complete_edit(edit.heads.back(), cache);
  }
}

void ScoredPolicy::evict_layer_topk(int layer, cache::KVCache& cache, cache::CacheEdit& edit) {
  const int heads = cache.n_kv_heads(), budget = budgets_[layer];
  // Each head's kept entries, its scores and ranking; a composed second policy then picks among them (then_keep*).
  std::vector<std::vector<int32_t>> keep(heads);
  std::vector<std::vector<float>> scores(heads);
  std::vector<std::vector<double>> ranking(heads);
  std::vector<bool> evicts(heads, false);
  for (int h = 0; h < heads; ++h) {
    const int n = cache.size(layer, h);
    // The promise is independent of the selection below: whatever is kept, it is this many.
    expected_[static_cast<std::size_t>(layer) * heads + h] = std::min(budget, n);
    if (n <= budget) {
      if (!then_) continue;
      // compose: once the second's count is fixed, a cache within it has nothing to give up
      const int fixed = then_counts_[static_cast<std::size_t>(layer) * heads + h];
      if (then_ratio_ == 0.0 || (fixed >= 0 && n <= fixed)) continue;
    }
    if (block_obs_[layer]) {  // block_scoring: kvpress BlockPress's blocks of the one-pass prefill
      if (h == 0)
        block_keep_ = block_scored_keep(*block_obs_[layer], cache, budget, protocol_.block_scoring, subset_ranking());
      edit.heads.push_back(keep_edit(layer, h, block_keep_.at(h), {}));
      complete_edit(edit.heads.back(), cache);
      continue;
    }
    scores[h] = std::move(pending_[layer][h]);
    ranking[h] = scores[h].empty() ? std::vector<double>(n, 0.0) : rank_scores(layer, h, scores[h]);
    keep[h] = keep_top_scores(std::span<const double>(ranking[h]), budget, sinks(budget), recent(budget));
    evicts[h] = true;
  }
  if (then_ && then_reads_attention_ && then_obs_[layer]) then_keep_subset(layer, budget, cache, keep, ranking);
  for (int h = 0; h < heads; ++h) {
    if (!evicts[h]) continue;
    if (then_) {
      if (!then_reads_attention_) keep[h] = then_keep(layer, h, keep[h]);
      expected_[static_cast<std::size_t>(layer) * heads + h] = static_cast<int>(keep[h].size());
      if (static_cast<int>(keep[h].size()) >= cache.size(layer, h)) continue;
    }
    edit.heads.push_back(keep_edit(layer, h, std::move(keep[h]), std::move(scores[h])));
    complete_edit(edit.heads.back(), cache);
  }
}

void ScoredPolicy::evict_layer_adakv(int layer, cache::KVCache& cache, cache::CacheEdit& edit) {
  const int heads = cache.n_kv_heads(), budget = budgets_[layer];
  std::vector<std::vector<float>> scores(heads);
  std::vector<std::vector<double>> ranking(heads);
  for (int h = 0; h < heads; ++h) {
    const int n = cache.size(layer, h);
    scores[h] = std::move(pending_[layer][h]);
    ranking[h] = scores[h].empty() ? std::vector<double>(n, 0.0) : rank_scores(layer, h, scores[h]);
  }
  // kvpress: n_safe = int(n_kept * alpha_safeguard), at least 1 when alpha_safeguard > 0.
  int n_safe = static_cast<int>(budget * alpha_safeguard_);
  if (alpha_safeguard_ > 0.0) n_safe = std::max(1, n_safe);
  std::vector<std::vector<int32_t>> keep =
      keep_top_scores_across_heads(ranking, budget, sinks(budget), recent(budget), n_safe);
  for (int h = 0; h < heads; ++h) {
    const int n = cache.size(layer, h);
    if (selection_ == Selection::CriticalAdaKV && static_cast<int>(keep[h].size()) < n) {
      // kvpress CriticalAdaKVPress: AdaKV decides only how many entries each head keeps; which ones is CriticalKV's
      // two stages within that count, the first at least the head's safeguard.
      const int head_budget = static_cast<int>(keep[h].size());
      const int first = std::max(static_cast<int>(head_budget * first_stage_ratio_), n_safe);
      keep[h] = keep_critical(layer, h, cache, ranking[h], head_budget, first);
    }
    // The promise is the selection's own count, which varies by head; the layer holds heads x budget in all.
    expected_[static_cast<std::size_t>(layer) * heads + h] = static_cast<int>(keep[h].size());
    if (static_cast<int>(keep[h].size()) >= n) continue;
    edit.heads.push_back(keep_edit(layer, h, std::move(keep[h]), std::move(scores[h])));
    complete_edit(edit.heads.back(), cache);
  }
}

void ScoredPolicy::evict_layer_chunks(int layer, cache::KVCache& cache, cache::CacheEdit& edit) {
  const int heads = cache.n_kv_heads(), budget = budgets_[layer], n = cache.size(layer, 0);
  for (int h = 1; h < heads; ++h)
    if (cache.size(layer, h) != n)
      throw Error("policy '" + name_ + "' selection=" + params_.get_choice("selection") + ": layer " +
                  std::to_string(layer) + " KV heads 0 and " + std::to_string(h) + " hold " + std::to_string(n) +
                  " and " + std::to_string(cache.size(layer, h)) +
                  " entries, but chunks are shared by the layer's heads");
  const int n_complete = n / chunk_length_, remaining = n % chunk_length_;
  if (n <= budget || n_complete == 0) return evict_layer_topk(layer, cache, edit);  // kvpress: the scorer's top-k
  std::vector<std::vector<float>> scores(heads);
  std::vector<std::vector<double>> ranking(heads);
  for (int h = 0; h < heads; ++h) {
    scores[h] = std::move(pending_[layer][h]);
    ranking[h] = scores[h].empty() ? std::vector<double>(n, 0.0) : rank_scores(layer, h, scores[h]);
  }
  // Protected entries (sinks, recent, SnapKV's window) score as kvpress's scorers pad them: the layer's highest
  // score plus one, so a chunk holding them ranks high but is not kept unconditionally.
  const int n_sinks = std::clamp(sinks(budget), 0, budget), n_recent = std::clamp(recent(budget), 0, budget - n_sinks);
  double top = -std::numeric_limits<double>::infinity();
  for (const auto& r : ranking)
    for (int j = n_sinks; j < n - n_recent; ++j) top = std::max(top, r[j]);
  if (!std::isfinite(top)) top = 0.0;
  std::vector<double> summed(n, 0.0);
  for (const auto& r : ranking)
    for (int j = 0; j < n; ++j) summed[j] += j < n_sinks || j >= n - n_recent ? top + 1.0 : r[j];
  if (selection_ == Selection::EntropyChunkKV) {
    const std::vector<int32_t> keep = entropy_gated_chunks(summed, kept_share(layer, budget, n));
    for (int h = 0; h < heads; ++h) {
      expected_[static_cast<std::size_t>(layer) * heads + h] = static_cast<int>(keep.size());
      if (static_cast<int>(keep.size()) >= n) continue;
      edit.heads.push_back(keep_edit(layer, h, keep, std::move(scores[h])));
      complete_edit(edit.heads.back(), cache);
    }
    return;
  }
  const int n_chunks = n_complete + (remaining > 0 ? 1 : 0);
  std::vector<double> chunk_score(n_chunks, 0.0);
  for (int c = 0; c < n_chunks; ++c) {
    const int begin = c * chunk_length_, end = std::min(n, begin + chunk_length_);
    for (int j = begin; j < end; ++j) chunk_score[c] += summed[j];
    chunk_score[c] /= end - begin;
  }
  // kvpress: max(1, int(n_chunks * (1 - R)))
  const int n_chunks_kept = std::clamp(static_cast<int>(n_chunks * kept_share(layer, budget, n)), 1, n_chunks);
  const std::vector<int32_t> chunks = keep_top_scores(std::span<const double>(chunk_score), n_chunks_kept, 0, 0);
  std::vector<int32_t> keep;
  for (int32_t c : chunks)
    for (int j = c * chunk_length_; j < std::min(n, (c + 1) * chunk_length_); ++j) keep.push_back(j);
  for (int h = 0; h < heads; ++h) {
    expected_[static_cast<std::size_t>(layer) * heads + h] = static_cast<int>(keep.size());
    if (static_cast<int>(keep.size()) >= n) continue;
    edit.heads.push_back(keep_edit(layer, h, keep, std::move(scores[h])));
    complete_edit(edit.heads.back(), cache);
  }
}

std::vector<int32_t> ScoredPolicy::entropy_gated_chunks(const std::vector<double>& summed, double kept_share) const {
  // kvpress EntropyGatedChunkKVPress.compress, step for step (its EPSILON 1e-8; torch.median: the lower middle value)
  constexpr double eps = 1e-8;
  const int n = static_cast<int>(summed.size()), length = chunk_length_;
  const int n_chunks = (n + length - 1) / length;
  int left = std::max(1, static_cast<int>(n * kept_share));
  std::vector<double> chunk_score(n_chunks), entropy(n_chunks);
  for (int c = 0; c < n_chunks; ++c) {
    const int begin = c * length, end = std::min(n, begin + length), m = end - begin;
    double sum = 0.0, low = std::numeric_limits<double>::infinity();
    for (int j = begin; j < end; ++j) sum += summed[j], low = std::min(low, summed[j]);
    chunk_score[c] = sum / m;
    if (m == 1) {  // a one-token tail chunk: entropy 0
      entropy[c] = 0.0;
      continue;
    }
    // negative scores are rebased so that the chunk's form a distribution
    const double shift = std::min(low, 0.0);
    double total = 0.0;
    for (int j = begin; j < end; ++j) total += summed[j] - shift;
    double h = 0.0;
    for (int j = begin; j < end; ++j) {
      const double p = (summed[j] - shift) / (total + eps);
      h -= p * std::log(p + eps);
    }
    entropy[c] = std::clamp(h / std::log(static_cast<double>(m)), 0.0, 1.0);
  }
  auto lower_median = [](std::vector<double> v) {
    const std::size_t k = (v.size() - 1) / 2;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  };
  const double score_threshold = lower_median(chunk_score), entropy_threshold = lower_median(entropy);
  std::vector<int32_t> order(n_chunks);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return chunk_score[a] > chunk_score[b]; });
  std::vector<char> keep(n, 0);
  for (int32_t c : order) {
    if (left <= 0) break;
    const int begin = c * length, end = std::min(n, begin + length);
    int n_kept = std::min(end - begin, left);
    // important but spiky: only its best entries
    if (chunk_score[c] >= score_threshold && entropy[c] < entropy_threshold)
      n_kept = std::min(n_kept, low_entropy_chunk_length_);
    for (int32_t j : keep_top_scores(std::span<const double>(summed.data() + begin, end - begin), n_kept, 0, 0))
      keep[begin + j] = 1;
    left -= n_kept;
  }
  if (left > 0) {  // what the spiky chunks left unspent: the best remaining entries
    std::vector<int32_t> rest;
    std::vector<double> rest_scores;
    for (int j = 0; j < n; ++j)
      if (!keep[j]) rest.push_back(j), rest_scores.push_back(summed[j]);
    for (int32_t i : keep_top_scores(std::span<const double>(rest_scores), left, 0, 0)) keep[rest[i]] = 1;
  }
  std::vector<int32_t> out;
  for (int j = 0; j < n; ++j)
    if (keep[j]) out.push_back(j);
  return out;
}

std::vector<int32_t> ScoredPolicy::then_keep(int layer, int kv_head, const std::vector<int32_t>& kept) {
  std::vector<float> scores = std::move(then_pending_[layer][kv_head]);
  const int k = static_cast<int>(kept.size());
  // kvpress ScorerPress.compress on the first press's k entries: a ratio of 0 keeps them all, else compute_n_kept
  if (then_ratio_ == 0.0 || k == 0) return kept;
  const int n_kept = then_count(layer, kv_head, k);
  std::vector<double> among(k, 0.0);
  if (!scores.empty()) {
    const std::vector<double> all = then_->rank_scores(layer, kv_head, scores);
    for (int i = 0; i < k; ++i) among[i] = all[kept[i]];
  }
  std::vector<int32_t> out;
  for (int32_t i : keep_top_scores(std::span<const double>(among), n_kept, then_->sinks(n_kept), then_->recent(n_kept)))
    out.push_back(kept[i]);
  return out;
}

int ScoredPolicy::then_count(int layer, int kv_head, int k) {
  int& fixed = then_counts_.at(static_cast<std::size_t>(layer) * run_.config.n_kv_heads + kv_head);
  if (fixed < 0) fixed = std::clamp(static_cast<int>(k * (1.0 - then_ratio_)), 1, std::max(k, 1));
  return std::min(fixed, k);
}

void ScoredPolicy::then_keep_subset(int layer, int budget, cache::KVCache& cache,
                                    std::vector<std::vector<int32_t>>& kept,
                                    const std::vector<std::vector<double>>& ranking) {
  const AttentionObservation obs = std::move(*then_obs_[layer]);
  then_obs_[layer].reset();
  // kvpress ScorerPress.compress on the first press's k entries: a ratio of 0 keeps them all, else compute_n_kept
  if (then_ratio_ == 0.0) return;
  const int heads = static_cast<int>(kept.size());
  // The first's entries as kvpress hands them on: its protected ones first (padded), then by its scores.
  const int n_sinks = std::clamp(sinks(budget), 0, budget);
  const int n_recent = std::clamp(recent(budget), 0, budget - n_sinks);
  std::vector<std::vector<int32_t>> order(heads);
  for (int h = 0; h < heads; ++h)
    order[h] = kvpress_handoff_order(ranking[h], kept[h], n_sinks, n_recent);
  const AttentionObservation sub = subset_attention_observation(obs, cache, order, then_->scorer_request(obs.phase));
  for (int h = 0; h < heads; ++h) {
    const int k = static_cast<int>(order[h].size());
    if (k == 0) continue;
    cache::KVCache scratch = head_subset_cache(cache, layer, h, order[h]);
    // A scorer may score every head at its head 0 (a Python file does): the call for h then reads this view's.
    if (h != 0) then_->score(sub, 0, scratch);
    const std::vector<float> s = then_->score(sub, h, scratch);
    if (!s.empty() && static_cast<int>(s.size()) != k)
      throw Error("policy '" + then_->name_ + "' (compose's second) scored " + std::to_string(s.size()) +
                  " entries of layer " + std::to_string(layer) + " kv head " + std::to_string(h) +
                  ", given the first's " + std::to_string(k));
    const std::vector<double> among = s.empty() ? std::vector<double>(k, 0.0) : then_->rank_scores(layer, h, s);
    const int n_kept = then_count(layer, h, k);
    std::vector<int32_t> out;
    for (int32_t i : keep_top_scores(std::span<const double>(among), n_kept, then_->sinks(n_kept),
                                     then_->recent(n_kept)))
      out.push_back(order[h][i]);
    std::sort(out.begin(), out.end());
    kept[h] = std::move(out);
  }
}

double ScoredPolicy::kept_share(int layer, int budget, int n) const {
  if (const double r = allocation_->layer_compression_ratio(layer); r >= 0.0) return 1.0 - r;
  return run_.compression_ratio >= 0.0 && budget == run_.budget ? 1.0 - run_.compression_ratio
                                                                : static_cast<double>(budget) / n;
}

const std::vector<float>& ScoredPolicy::output_projection(int layer) {
  const auto& config = run_.config;
  const int dim = config.dim, width = config.q_width();
  std::vector<float>& wo = output_projection_.at(layer);
  if (!wo.empty()) return wo;  // dequantized once per run and layer
  if (!run_.weights || layer >= static_cast<int>(run_.weights->layers.size()))
    throw Error("policy '" + name_ + "' selection=" + params_.get_choice("selection") +
                " needs the model's output projection W_o, which this run does not give");
  const kernels::QuantMatrix& m = run_.weights->layers[layer].wo;
  if (m.rows != dim || m.cols != width)
    throw Error("policy '" + name_ + "' selection=" + params_.get_choice("selection") + ": layer " +
                std::to_string(layer) + "'s W_o is " + std::to_string(m.rows) + " x " + std::to_string(m.cols) +
                ", expected " + std::to_string(dim) + " x " + std::to_string(width));
  wo.resize(static_cast<std::size_t>(m.rows) * m.cols);
  for (int r = 0; r < m.rows; ++r)
    kernels::dequantize_row(m.type, m.row(r), wo.data() + static_cast<std::size_t>(r) * m.cols, m.cols);
  return wo;
}

std::vector<int32_t> ScoredPolicy::keep_critical(int layer, int kv_head, const cache::KVCache& cache,
                                                 std::vector<double> ranking, int budget, int first) {
  const auto& config = run_.config;
  const int head_dim = config.head_dim, dim = config.dim, group = config.group_size(), width = config.q_width();
  const std::vector<float>& wo = output_projection(layer);
  const int n = cache.size(layer, kv_head);
  // Stage 1 by the score alone, after the protected entries: kept whatever stage 2 says.
  const int n_sinks = std::clamp(sinks(budget), 0, budget);
  const int n_recent = std::clamp(recent(budget), 0, budget - n_sinks);
  const std::vector<int32_t> stage1 = keep_top_scores(
      std::span<const double>(ranking), std::clamp(std::max(first, n_sinks + n_recent), 0, budget), n_sinks, n_recent);
  // Stage 2: (score + epsilon) x |W_o v_j|_1 per query head of the group, averaged over the group (CriticalKV's
  // output-aware importance; kvpress vwl1norm). Values carry no RoPE, so their head dimensions are in W_o's order.
  const std::span<const float> values = cache.values(layer, kv_head);
  for (int j = 0; j < n; ++j) {
    const float* v = values.data() + static_cast<std::size_t>(j) * head_dim;
    double norm = 0.0;
    for (int q = kv_head * group; q < (kv_head + 1) * group; ++q)
      for (int r = 0; r < dim; ++r) {
        const float* w = wo.data() + static_cast<std::size_t>(r) * width + static_cast<std::size_t>(q) * head_dim;
        float out = 0.0f;
        for (int d = 0; d < head_dim; ++d) out += w[d] * v[d];
        norm += std::fabs(out);
      }
    ranking[j] = (ranking[j] + critical_epsilon_) * (norm / group);
  }
  for (int32_t j : stage1) ranking[j] = std::numeric_limits<double>::infinity();
  return keep_top_scores(std::span<const double>(ranking), budget, 0, 0);
}

void ScoredPolicy::evict_layer_critical(int layer, cache::KVCache& cache, cache::CacheEdit& edit) {
  const int heads = cache.n_kv_heads(), budget = budgets_[layer];
  for (int h = 0; h < heads; ++h) {
    const int n = cache.size(layer, h);
    expected_[static_cast<std::size_t>(layer) * heads + h] = std::min(budget, n);
    if (n <= budget) continue;
    std::vector<float> scores = std::move(pending_[layer][h]);
    std::vector<double> ranking = scores.empty() ? std::vector<double>(n, 0.0) : rank_scores(layer, h, scores);
    // Stage 1 is kvpress's int((1 - R) n first_stage_ratio) entries, at least 1.
    int first = static_cast<int>(kept_share(layer, budget, n) * n * first_stage_ratio_);
    if (first_stage_ratio_ > 0.0) first = std::max(1, first);
    edit.heads.push_back(keep_edit(layer, h, keep_critical(layer, h, cache, std::move(ranking), budget, first),
                                   std::move(scores)));
    complete_edit(edit.heads.back(), cache);
  }
}

cache::CacheEdit ScoredPolicy::after_step(const StepInfo& step, cache::KVCache& cache) {
  cache::CacheEdit edit;
  if (protocol_.evicts_in(step.phase, step.prefill_done, step.step)) {
    if (step.prefill_done && !budgets_final_) finalize_budgets(step.seq_len);
    // Layers trimmed before their output are at their budgets already and only renew their promise here.
    for (int l = 0; l < static_cast<int>(budgets_.size()); ++l) evict_layer(l, cache, edit);
    started_ = true;
  } else if (started_) {
    for (int& e : expected_) e += step.seq_len - expected_seq_len_;
  }
  expected_seq_len_ = step.seq_len;
  for (auto& o : block_obs_) o.reset();
  for (auto& o : then_obs_) o.reset();
  for (auto& layer : pending_)
    for (auto& s : layer) s.clear();
  return edit;
}

int ScoredPolicy::expected_length(int layer, int kv_head, const StepInfo& step) const {
  if (!started_) return step.seq_len;
  const int heads = run_.config.n_kv_heads;
  return expected_[static_cast<std::size_t>(layer) * heads + kv_head] + (step.seq_len - expected_seq_len_);
}

}  // namespace kvscope::policy
