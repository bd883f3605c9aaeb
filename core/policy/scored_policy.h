#pragma once
// The shared body of score-based eviction policies, after kvpress: a subclass says what it needs to see
// of attention, when it acts and how it scores each cache entry; this base spreads the budget over the
// layers (any allocation, by the `allocation` parameter), protects sinks and recent entries, keeps the
// highest scores, and knows the lengths it promises the engine. A policy is then ~50 lines.
#include <memory>
#include <string>
#include <vector>

#include "core/policy/allocation.h"
#include "core/policy/params.h"
#include "core/policy/policy.h"

namespace kvscope::policy {

// When a scored policy evicts.
enum class Timing {
  AfterPrefill,  // once, after the last prefill step (SnapKV, PyramidKV); decode tokens are then appended
  EveryStep,     // after every prefill block and every decode step (StreamingLLM, H2O, TOVA)
};

// A scored policy's parameters: its own, then `allocation` (a choice of every registered allocation) and
// the parameters of every allocation. A name the policy already declares is shared with an allocation
// that declares it too.
std::vector<ParamSpec> with_allocation_params(std::vector<ParamSpec> own,
                                              const std::string& default_allocation = "uniform");

class ScoredPolicy : public Policy {
 public:
  ScoredPolicy(std::string name, Timing timing, const PolicyParams& params);

  std::string name() const override { return name_; }
  ObservationRequest request(int layer, Phase phase) const final;
  void begin(const RunInfo& info) final;
  cache::CacheEdit after_layer(const AttentionObservation& obs, cache::KVCache& cache) final;
  cache::CacheEdit after_step(const StepInfo& step, cache::KVCache& cache) final;
  int expected_length(int layer, int kv_head, const StepInfo& step) const final;
  std::vector<int> layer_budgets() const final { return budgets_; }

 protected:
  // What the scorer needs to see of attention in `phase` (the allocation's needs are added here).
  virtual ObservationRequest scorer_request(Phase phase) const = 0;
  // One score per entry of (obs.layer, kv_head), in cache order; higher is kept first. Empty means "no
  // score": only sinks and recent entries decide. Called for each observation of a step in which the
  // policy acts (the final prefill step only, for AfterPrefill); a scorer may also update the cache's
  // per-entry accumulator here (H2O).
  virtual std::vector<float> score(const AttentionObservation& obs, int kv_head, cache::KVCache& cache) = 0;
  // Entries at the start and at the end of a (layer, KV head) that stay whatever their score, when it
  // may hold `budget` entries. keep_top_scores clamps them to the budget, sinks first.
  virtual int sinks(int /*budget*/) const { return 0; }
  virtual int recent(int /*budget*/) const { return 0; }
  // Tokens of each layer's budget the allocation must leave in place (SnapKV's observation window).
  virtual int reserved() const { return 0; }
  virtual void on_begin(const RunInfo&) {}

  const RunInfo& run_info() const { return run_; }
  const PolicyParams& params() const { return params_; }

 private:
  bool is_final_prefill(const AttentionObservation& obs) const;
  void finalize_budgets(int seq_len);

  std::string name_;
  Timing timing_;
  PolicyParams params_;
  std::string allocation_name_;
  std::unique_ptr<LayerAllocation> allocation_;
  RunInfo run_;
  std::vector<int> budgets_;  // [layers]
  bool budgets_final_ = false;
  std::vector<std::vector<std::vector<float>>> pending_;  // [layers][kv_heads][entries]: this step's scores
  std::vector<int> expected_;                             // [layers * kv_heads] after the last step
  int expected_seq_len_ = 0;
  bool started_ = false;  // has the policy acted yet
};

}  // namespace kvscope::policy
