// StreamingLLM (Xiao et al., 2024, "Efficient Streaming Language Models with Attention Sinks", §3.2):
// keep the first tokens, which soak up attention whatever they say (attention sinks), and a rolling window
// of the most recent ones. No attention is read; see docs/policies.md, "streaming_llm".
#include "core/policy/catalog.h"
#include "core/policy/scored_policy.h"

namespace kvscope::policy {

namespace {

class StreamingLlmPolicy final : public ScoredPolicy {
 public:
  explicit StreamingLlmPolicy(const PolicyParams& p)
      : ScoredPolicy("streaming_llm", Timing::EveryStep, p), sinks_(p.get_int("sinks")) {}

 protected:
  ObservationRequest scorer_request(Phase) const override { return {}; }
  // Only position decides, so there is nothing to rank: sinks and the recent window fill the budget.
  std::vector<float> score(const AttentionObservation&, int, cache::KVCache&) override { return {}; }
  int sinks(int) const override { return sinks_; }
  int recent(int budget) const override { return budget - sinks_; }

 private:
  int sinks_;
};

}  // namespace

PolicyInfo streaming_llm_policy_info() {
  return {
      "streaming_llm", "attention sinks (the first tokens) plus a rolling window of the most recent tokens",
      "Xiao et al. 2024, Efficient Streaming Language Models with Attention Sinks (ICLR), §3.2",
      with_allocation_params({ParamSpec::integer(
          "sinks", 4, 0, 1024,
          "§3.2/§4: initial tokens kept as attention sinks (the paper finds 4 enough); the rest of the budget is the "
          "recent window")}),
      [](const PolicyParams& p) { return std::make_unique<StreamingLlmPolicy>(p); }};
}

}  // namespace kvscope::policy
