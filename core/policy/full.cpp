// Full: no compression. The reference every other policy is compared against.
#include "core/policy/catalog.h"

namespace kvscope::policy {

namespace {

class FullPolicy final : public Policy {
 public:
  std::string name() const override { return "full"; }
  ObservationRequest request(int, Phase) const override { return {}; }
  void begin(const RunInfo& info) override { layers_ = info.config.n_layers; }
  cache::CacheEdit after_layer(const AttentionObservation&, cache::KVCache&) override { return {}; }
  cache::CacheEdit after_step(const StepInfo& step, cache::KVCache&) override {
    seq_len_ = step.seq_len;
    return {};
  }
  int expected_length(int, int, const StepInfo& step) const override { return step.seq_len; }
  std::vector<int> layer_budgets() const override { return std::vector<int>(layers_, seq_len_); }

 private:
  int layers_ = 0;
  int seq_len_ = 0;
};

}  // namespace

PolicyInfo full_policy_info() {
  return {"full", "no compression: every token stays in every layer", "-", {},
          [](const PolicyParams&) { return std::make_unique<FullPolicy>(); }};
}

}  // namespace kvscope::policy
