#pragma once
// Layer budget allocation, separate from token scoring so any scorer can use any allocation
// (`--policy snapkv --allocation cake`), as the papers themselves combine them.
#include <memory>
#include <string>
#include <vector>

#include "core/observation/attention_observation.h"
#include "core/policy/diagnostics.h"
#include "core/policy/params.h"

namespace kvscope::policy {

class LayerAllocation {
 public:
  virtual ~LayerAllocation() = default;
  virtual std::string name() const = 0;
  // What the allocation needs to see of each layer's prefill attention (none for static shapes).
  virtual observation::ObservationRequest request(int layer) const = 0;
  // Each layer's observation of the (final) prefill step, in layer order.
  virtual void observe(const observation::AttentionObservation& obs) = 0;
  // Budgets per layer after all layers were observed; they sum to n_layers * average_budget (up to
  // the per-layer clamp [1, seq_len]).
  virtual std::vector<int> budgets(int n_layers, int average_budget, int seq_len) = 0;
  // Named numbers behind the last budgets() call (preferences, variances ...), for the trace.
  virtual void publish(Diagnostics& /*out*/) const {}
  // Whether budgets() decides each layer's count by itself (per_layer's ratios), so that it runs even when the
  // run's budget holds the whole prompt, and the run's budget is not its average.
  virtual bool sets_own_budgets() const { return false; }
  // kvpress's compression ratio of `layer` when the allocation states one (per_layer), else -1: what a selection
  // that computes with R (chunkkv, criticalkv) uses for that layer.
  virtual double layer_compression_ratio(int /*layer*/) const { return -1.0; }

  // Tokens of every layer's budget the scorer keeps whatever the allocation says (SnapKV's observation
  // window). Shape-based allocations spread only the budget above it, as PyramidKV does.
  void set_reserved(int tokens) { reserved_ = tokens; }
  // The compression ratio R when the user's budget was `--compression-ratio R` (-1 otherwise): an allocation
  // that follows kvpress's arithmetic computes with the real n (1 - R), not the truncated average budget.
  void set_compression_ratio(double ratio) { compression_ratio_ = ratio; }

 protected:
  int reserved_ = 0;
  double compression_ratio_ = -1.0;
};

// Allocations by name: uniform, pyramid, and the adaptive ones of D2O, DynamicKV and CAKE. The table
// itself, and how to add to it, is in allocation_catalog.h.
std::vector<std::string> allocation_names();
std::vector<ParamSpec> allocation_params(const std::string& name);
// Throws UsageError listing the valid names for an unknown one.
std::unique_ptr<LayerAllocation> make_allocation(const std::string& name, const PolicyParams& params);

// Shared arithmetic: integer budgets proportional to non-negative weights, summing exactly to total,
// each clamped to [min_each, max_each] (largest-remainder rounding, deterministic). A total outside
// [n * min_each, n * max_each] is first clamped into it. All-zero weights share equally.
std::vector<int> proportional_budgets(const std::vector<double>& weights, long total, int min_each, int max_each);

}  // namespace kvscope::policy
