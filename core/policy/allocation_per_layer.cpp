// kvpress's PerLayerCompressionPress as an allocation: the user states one compression ratio per layer
// (`layer_ratios=0.1/0.25/...`), and layer l keeps kvpress's `max(1, int(n * (1 - r_l)))` of its n entries
// whatever the run's budget, with any scorer. See docs/policies.md, "Allocation: per_layer".
#include <algorithm>
#include <string>

#include "core/common/error.h"
#include "core/policy/allocation_catalog.h"

namespace kvscope::policy {

namespace {

class PerLayerAllocation final : public LayerAllocation {
 public:
  explicit PerLayerAllocation(std::vector<double> ratios) : ratios_(std::move(ratios)) {}
  std::string name() const override { return "per_layer"; }
  observation::ObservationRequest request(int) const override { return {}; }
  void observe(const observation::AttentionObservation&) override {}
  bool sets_own_budgets() const override { return true; }
  double layer_compression_ratio(int layer) const override {
    return layer >= 0 && layer < static_cast<int>(ratios_.size()) ? ratios_[layer] : -1.0;
  }

  std::vector<int> budgets(int n_layers, int /*average_budget*/, int seq_len) override {
    if (static_cast<int>(ratios_.size()) != n_layers)
      throw UsageError("allocation 'per_layer': layer_ratios has " + std::to_string(ratios_.size()) +
                       " values, but the model has " + std::to_string(n_layers) +
                       " layers; give one compression ratio per layer, e.g. layer_ratios=" + example(n_layers));
    std::vector<int> out(n_layers);
    // kvpress's compute_n_kept, with Python's float arithmetic (double): a ratio of 0 keeps every entry.
    for (int l = 0; l < n_layers; ++l)
      out[l] = std::clamp(static_cast<int>(seq_len * (1.0 - ratios_[l])), 1, std::max(seq_len, 1));
    return out;
  }

 private:
  static std::string example(int n_layers) {
    std::string text;
    for (int l = 0; l < n_layers; ++l) text += (l ? "/" : "") + std::string(l % 2 ? "0.5" : "0.25");
    return text;
  }

  std::vector<double> ratios_;
};

}  // namespace

AllocationInfo per_layer_allocation_info() {
  return {"per_layer",
          "each layer its own compression ratio (kvpress PerLayerCompressionPress): layer l keeps max(1, int(n (1 - "
          "r_l))) of n entries, whatever the run's budget",
          "kvpress PerLayerCompressionPress (NVIDIA, 2025)",
          {ParamSpec::real_list("layer_ratios", 0.0, 1.0, true,
                                "allocation=per_layer: one compression ratio per layer, from the bottom layer, "
                                "separated by '/' (kvpress compression_ratios); layer l keeps max(1, int(n (1 - "
                                "r_l)))")},
          [](const PolicyParams& p) {
            const std::vector<double>& ratios = p.get_list("layer_ratios");
            if (ratios.empty())
              throw UsageError("allocation 'per_layer' needs layer_ratios, one compression ratio per layer "
                               "separated by '/' (e.g. layer_ratios=0.25/0.5/...)");
            return std::make_unique<PerLayerAllocation>(ratios);
          }};
}

}  // namespace kvscope::policy
