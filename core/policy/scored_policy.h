#pragma once
// The shared body of score-based eviction policies, after kvpress: a subclass says what it needs to see
// of attention, when it acts and how it scores each cache entry; this base spreads the budget over the
// layers (any allocation, by the `allocation` parameter), protects sinks and recent entries, keeps the
// highest scores, and knows the lengths it promises the engine. A policy is then ~50 lines.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/policy/allocation.h"
#include "core/policy/block_scoring.h"
#include "core/policy/decode_row_buffer.h"
#include "core/policy/params.h"
#include "core/policy/policy_layers.h"
#include "core/policy/policy.h"
#include "core/policy/protocol.h"

namespace kvscope::policy {

// A scored policy's parameters: its own, the protocol switches (protocol.h) with the policy's paper
// defaults, then `allocation` (a choice of every registered allocation) and the parameters of every
// allocation, then `selection` (how the kept entries are picked from the scores: per head (topk), AdaKV's
// head-adaptive split of a layer's budget (adakv, with `alpha_safeguard`) or ChunkKV's whole chunks (chunkkv,
// with `chunk_length`) or CriticalKV's output-aware rescoring (criticalkv, with `first_stage_ratio` and
// `critical_epsilon`) or both of AdaKV's and CriticalKV's (criticaladakv: AdaKV's head budgets, CriticalKV's
// entries within each) or kvpress ChunkPress's chunks, each scored alone (chunk, with `chunk_length`)). A name the
// policy already declares is shared with an allocation that declares it too.
std::vector<ParamSpec> scored_policy_params(std::vector<ParamSpec> own, const Protocol& protocol_defaults,
                                            const std::string& default_allocation = "uniform");

// An allocation's parameters exist only when that allocation is chosen: removes from `params` those of the
// allocations `params`' `allocation` does not name (kvscope's own copies, as scored_policy_params added them),
// so that neither the policy nor a trace sees them. Throws UsageError naming `policy` when the spec set one.
// Does nothing for a policy without an `allocation` parameter. Likewise `alpha_safeguard` exists only with
// selection=adakv, `chunk_length` only with selection=chunkkv, and so on.
// `selection` and the parameters of every selection (alpha_safeguard, chunk_length, ...): the framework's names.
bool is_selection_param(const std::string& name);

void drop_unchosen_allocation_params(const std::string& policy, const std::vector<ParamSpec>& specs,
                                     PolicyParams& params);

class ScoredPolicy : public Policy {
 public:
  ScoredPolicy(std::string name, const PolicyParams& params);

  std::string name() const override { return name_; }
  ObservationRequest request(int layer, Phase phase) const final;
  int prefill_block_size() const final { return protocol_.block; }
  bool trims_before_output(Phase phase) const final { return protocol_.trims_before_output(phase); }
  void begin(const RunInfo& info) final;
  cache::CacheEdit after_layer(const AttentionObservation& obs, cache::KVCache& cache) final;
  cache::CacheEdit after_step(const StepInfo& step, cache::KVCache& cache) final;
  int expected_length(int layer, int kv_head, const StepInfo& step) const final;
  std::vector<int> layer_budgets() const final { return budgets_; }

  // kvpress's ComposedPress of two presses: after this policy keeps its budget of a (layer, KV head)'s k entries,
  // `then` keeps max(1, int(k (1 - then_ratio))) of those by its own scores, protecting its own sinks and recent
  // entries among them. A `then` that reads attention scores only those k entries, in the order kvpress hands them
  // on, with attention recomputed over them (compose_subset.h); any other scores every entry of the same
  // observation, ranked among the kept ones (the same for a score of each entry alone). Both policies select per
  // head (selection=topk); compose_policy.h builds the pair from a `compose:` spec.
  void chain(std::unique_ptr<ScoredPolicy> then, double then_ratio);

 protected:
  // What the scorer needs to see of attention in `phase` (the allocation's needs are added here).
  virtual ObservationRequest scorer_request(Phase phase) const = 0;
  // Whether the scorer reads attention (column sums, window parts, rows, log-sum-exp), which block_scoring's subsets
  // do not have (kvpress's BlockPress refuses attention weights). By default: whether its prefill request asks.
  virtual bool scorer_reads_attention() const;
  // One score per entry of (obs.layer, kv_head), in cache order; higher is kept first. Empty means "no
  // score": only sinks and recent entries decide. Called for each observation of a step in which the
  // policy evicts (protocol.h); a scorer may also update the cache's per-entry accumulator here (H2O).
  virtual std::vector<float> score(const AttentionObservation& obs, int kv_head, cache::KVCache& cache) = 0;
  // Entries at the start and at the end of a (layer, KV head) that stay whatever their score, when it
  // may hold `budget` entries. keep_top_scores clamps them to the budget, sinks first.
  virtual int sinks(int /*budget*/) const { return 0; }
  virtual int recent(int /*budget*/) const { return 0; }
  // Tokens of each layer's budget the allocation must leave in place (SnapKV's observation window).
  virtual int reserved() const { return 0; }
  virtual void on_begin(const RunInfo&) {}
  // Each eviction's edit once its kept set is chosen, before the cache applies it: a scorer that merges
  // what it evicts adds the merges here (CaM).
  virtual void complete_edit(cache::HeadEdit& /*edit*/, const cache::KVCache& /*cache*/) {}

  // What ranks the entries of (layer, kv_head): `scores` as doubles by default; a scorer with more precise
  // scores than the float32 it hands on (a Python policy's float64) returns those instead.
  virtual std::vector<double> rank_scores(int layer, int kv_head, std::span<const float> scores);

  // The run's allocation: by default the `allocation` parameter's; a user's policy file may bring its own.
  virtual std::unique_ptr<LayerAllocation> make_layer_allocation() const;

  const RunInfo& run_info() const { return run_; }
  const PolicyParams& params() const { return params_; }
  const Protocol& protocol() const { return protocol_; }

 private:
  bool is_final_prefill(const AttentionObservation& obs) const;
  void finalize_budgets(int seq_len);
  // Evicts (layer, every KV head) to the layer's budget by this step's scores, into `edit`.
  void evict_layer(int layer, cache::KVCache& cache, cache::CacheEdit& edit);
  // selection=topk: each head keeps its own highest scores.
  void evict_layer_topk(int layer, cache::KVCache& cache, cache::CacheEdit& edit);
  // selection=adakv: the layer keeps n_kv_heads x budget entries chosen jointly over its heads;
  // selection=criticaladakv: as many per head, each head's chosen by CriticalKV's two stages.
  void evict_layer_adakv(int layer, cache::KVCache& cache, cache::CacheEdit& edit);
  // selection=chunkkv: every head of the layer keeps the same whole chunks.
  void evict_layer_chunks(int layer, cache::KVCache& cache, cache::CacheEdit& edit);
  // selection=entropy_chunkkv: kvpress EntropyGatedChunkKVPress's kept entries (shared by the layer's heads) from
  // the head-summed scores `summed`, keeping max(1, int(n kept_share)).
  std::vector<int32_t> entropy_gated_chunks(const std::vector<double>& summed, double kept_share) const;
  // selection=chunk: kvpress ChunkPress, each chunk of the one-pass prefill scored alone, keeping its share.
  void evict_layer_chunk_scored(int layer, cache::KVCache& cache, cache::CacheEdit& edit);
  // The scorer on a subset of a layer's entries (block_scoring's blocks, selection=chunk's chunks).
  SubsetRanking subset_ranking();
  // selection=criticalkv: the first stage by score, the rest by score x |W_o v|_1.
  void evict_layer_critical(int layer, cache::KVCache& cache, cache::CacheEdit& edit);
  // CriticalKV's two stages on one (layer, kv_head): its protected entries and the `first` best by `ranking`, then
  // the rest of `budget` by (ranking + critical_epsilon) x |W_o v|_1. Ascending entry indices.
  std::vector<int32_t> keep_critical(int layer, int kv_head, const cache::KVCache& cache, std::vector<double> ranking,
                                     int budget, int first);
  // W_o of `layer`, dequantized on first use, (dim, n_heads x head_dim).
  const std::vector<float>& output_projection(int layer);
  bool head_adaptive() const { return selection_ == Selection::AdaKV || selection_ == Selection::CriticalAdaKV; }
  bool output_aware() const { return selection_ == Selection::CriticalKV || selection_ == Selection::CriticalAdaKV; }
  // chain(): the second policy's pick among the entries `kept` (ascending) of (layer, kv_head).
  std::vector<int32_t> then_keep(int layer, int kv_head, const std::vector<int32_t>& kept);
  // How many of the first's k entries the second keeps on (layer, kv_head): kvpress's int(k (1 - R2)) at the
  // head's first eviction, and that count at every later one (ComposedPress compresses once, so a decode
  // eviction holds the composed size rather than cutting R2 again).
  int then_count(int layer, int kv_head, int k);
  // chain() with a second policy that reads attention: every head's pick among its `kept` entries (ascending, replaced
  // by the pick), scored on the layer's observation restricted to them (compose_subset.h); `ranking` the first's.
  void then_keep_subset(int layer, int budget, cache::KVCache& cache, std::vector<std::vector<int32_t>>& kept,
                        const std::vector<std::vector<double>>& ranking);
  // kvpress's 1 - R for this layer: the allocation's ratio of the layer when it states one (per_layer), the run's
  // when the budget was a compression ratio and the layer has the run's budget, else the layer's kept share
  // budget / n.
  double kept_share(int layer, int budget, int n) const;

  std::string name_;
  Protocol protocol_;
  PolicyParams params_;
  std::string allocation_name_;
  std::unique_ptr<LayerAllocation> allocation_;
  PolicyLayers allocated_layers_;  // what the allocation spreads the budget over (policy_layers.h)
  enum class Selection { TopK, AdaKV, ChunkKV, CriticalKV, CriticalAdaKV, Chunk, EntropyChunkKV };
  Selection selection_ = Selection::TopK;
  double alpha_safeguard_ = 0.0;                             // selection=adakv, criticaladakv
  int chunk_length_ = 0;                                     // selection=chunkkv, chunk, entropy_chunkkv
  int low_entropy_chunk_length_ = 0;                         // selection=entropy_chunkkv
  double first_stage_ratio_ = 0.0, critical_epsilon_ = 0.0;  // selection=criticalkv, criticaladakv
  std::vector<std::vector<float>> output_projection_;        // [layer]: W_o dequantized, (dim, n_heads x head_dim)
  std::unique_ptr<ScoredPolicy> then_;                         // chain()
  double then_ratio_ = 0.0;                                    // chain()
  bool then_reads_attention_ = false;                          // chain(): then_ scores compose_subset.h's view
  std::vector<std::optional<AttentionObservation>> then_obs_;  // [layers]: the observation it is scored on
  std::vector<std::vector<std::vector<float>>> then_pending_;  // [layers][kv_heads][entries]: then_'s scores
  std::vector<int> then_counts_;  // [layers * kv_heads]: what the second keeps, fixed at the first eviction; -1 before
  RunInfo run_;
  std::vector<int> budgets_;  // [layers]
  bool budgets_final_ = false;
  std::vector<std::vector<std::vector<float>>> pending_;  // [layers][kv_heads][entries]: this step's scores
  // block_scoring, selection=chunk: each layer's one-pass prefill
  std::vector<std::optional<AttentionObservation>> block_obs_;
  std::vector<std::vector<int32_t>> block_keep_;  // block_scoring: the layer's kept entries per KV head
  DecodeRowBuffer decode_rows_;  // decode_interval > 1: the rows of the decode steps since the last eviction
  std::vector<int> expected_;                             // [layers * kv_heads] after the last step
  int expected_seq_len_ = 0;
  bool started_ = false;  // has the policy acted yet
};

}  // namespace kvscope::policy
