#include "core/policy/scored_policy.h"

#include <algorithm>

#include "core/common/error.h"
#include "core/policy/allocation_catalog.h"
#include "core/policy/allocation_report.h"
#include "core/policy/selection.h"

namespace kvscope::policy {

std::vector<ParamSpec> scored_policy_params(std::vector<ParamSpec> own, const Protocol& protocol_defaults,
                                            const std::string& default_allocation) {
  for (auto& spec : protocol_params(protocol_defaults)) own.push_back(std::move(spec));
  std::string names;
  for (const auto& n : allocation_names()) names += (names.empty() ? "" : ", ") + n;
  own.push_back(ParamSpec::choice("allocation", default_allocation, allocation_names(),
                                  "how the budget is spread over layers (" + names +
                                      "); the average stays the budget. See docs/policies.md, Allocations"));
  for (const auto& info : all_allocations())
    for (const auto& spec : info.params) {
      const bool declared =
          std::any_of(own.begin(), own.end(), [&](const ParamSpec& s) { return s.name == spec.name; });
      if (!declared) own.push_back(spec);
    }
  return own;
}

void drop_unchosen_allocation_params(const std::string& policy, const std::vector<ParamSpec>& specs,
                                     PolicyParams& params) {
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
      allocation_name_(params.get_choice("allocation")) {
  // Built once here so that a bad allocation parameter fails when the policy is made, not mid-run.
  allocation_ = make_allocation(allocation_name_, params_);
}

std::unique_ptr<LayerAllocation> ScoredPolicy::make_layer_allocation() const {
  return make_allocation(params_.get_choice("allocation"), params_);
}

ObservationRequest ScoredPolicy::request(int layer, Phase phase) const {
  // Without decode eviction nothing reads decode attention (an accumulated score no longer matters).
  ObservationRequest r =
      phase == Phase::Prefill || protocol_.decode_evict ? scorer_request(phase) : ObservationRequest{};
  if (phase == Phase::Prefill && allocation_) r.merge(allocation_->request(layer));
  return r;
}

void ScoredPolicy::begin(const RunInfo& info) {
  run_ = info;
  const int layers = info.config.n_layers, heads = info.config.n_kv_heads;
  allocation_ = make_layer_allocation();  // a fresh one: adaptive allocations keep state
  allocation_name_ = allocation_->name();
  budgets_.assign(layers, info.budget);
  budgets_final_ = false;
  pending_.assign(layers, std::vector<std::vector<float>>(heads));
  expected_.assign(static_cast<std::size_t>(layers) * heads, 0);
  expected_seq_len_ = 0;
  started_ = false;
  diagnostics_ = Diagnostics();
  publish_protocol(protocol_, info.budget, "policy '" + name_ + "'", diagnostics_);
  diagnostics_.set_setting("allocation", "\"" + allocation_name_ + "\"");
  on_begin(info);
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
  if (final_prefill) allocation_->observe(obs);
  if (!protocol_.evicts_in(obs.phase, obs.phase == Phase::Decode || final_prefill)) return {};
  for (int h = 0; h < obs.n_kv_heads; ++h) {
    std::vector<float> s = score(obs, h, cache);
    if (!s.empty() && static_cast<int>(s.size()) != cache.size(obs.layer, h))
      throw Error("policy '" + name_ + "' scored " + std::to_string(s.size()) + " entries of layer " +
                  std::to_string(obs.layer) + " kv head " + std::to_string(h) + ", which holds " +
                  std::to_string(cache.size(obs.layer, h)));
    pending_[obs.layer][h] = std::move(s);
  }
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
  // past it, and a reshaped budget would evict in decode what the user's budget allows.
  if (run_.budget < seq_len) {
    allocation_->set_reserved(reserved());
    std::vector<int> b = allocation_->budgets(layers, run_.budget, seq_len);
    if (static_cast<int>(b.size()) != layers)
      throw Error("allocation '" + allocation_name_ + "' gave " + std::to_string(b.size()) + " budgets for " +
                  std::to_string(layers) + " layers");
    for (int& v : b) v = std::max(v, 1);
    budgets_ = std::move(b);
    allocation_->publish(diagnostics_);
  }
  diagnostics_.set("layer_budgets", {std::vector<double>(budgets_.begin(), budgets_.end()),
                                     {layers},
                                     {"layer"},
                                     "tokens each KV head of a layer keeps (allocation " + allocation_name_ +
                                         ", average " + std::to_string(run_.budget) + ")"});
  report_layer_budgets(budgets_, seq_len, run_.budget, reserved(),
                       "policy '" + name_ + "', allocation '" + allocation_name_ + "'", diagnostics_);
}

std::vector<int32_t> ScoredPolicy::choose_kept(int, int, std::span<const float> scores, int budget, int n_sinks,
                                               int n_recent) {
  return keep_top_scores(scores, budget, n_sinks, n_recent);
}

void ScoredPolicy::evict_layer(int layer, cache::KVCache& cache, cache::CacheEdit& edit) {
  const int heads = cache.n_kv_heads();
  for (int h = 0; h < heads; ++h) {
    const int n = cache.size(layer, h), budget = budgets_[layer];
    // The promise is independent of the selection below: whatever is kept, it is this many.
    expected_[static_cast<std::size_t>(layer) * heads + h] = std::min(budget, n);
    if (n <= budget) continue;
    std::vector<float> scores = std::move(pending_[layer][h]);
    const std::vector<float> ranking = scores.empty() ? std::vector<float>(n, 0.0f) : scores;
    edit.heads.push_back(
        keep_edit(layer, h, choose_kept(layer, h, ranking, budget, sinks(budget), recent(budget)), std::move(scores)));
    complete_edit(edit.heads.back(), cache);
  }
}

cache::CacheEdit ScoredPolicy::after_step(const StepInfo& step, cache::KVCache& cache) {
  cache::CacheEdit edit;
  if (protocol_.evicts_in(step.phase, step.prefill_done)) {
    if (step.prefill_done && !budgets_final_) finalize_budgets(step.seq_len);
    // Layers trimmed before their output are at their budgets already and only renew their promise here.
    for (int l = 0; l < static_cast<int>(budgets_.size()); ++l) evict_layer(l, cache, edit);
    started_ = true;
  } else if (started_) {
    for (int& e : expected_) e += step.seq_len - expected_seq_len_;
  }
  expected_seq_len_ = step.seq_len;
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
