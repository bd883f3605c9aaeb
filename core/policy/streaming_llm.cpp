// StreamingLLM (Xiao et al., 2024, "Efficient Streaming Language Models with Attention Sinks", §3.2):
// keep the first tokens, which soak up attention whatever they say (attention sinks), and a rolling window
// of the most recent ones. No attention is read; see docs/policies.md, "streaming_llm". Also the sink-free
// window baseline, `local_window`.
#include "core/policy/catalog.h"
#include "core/policy/scored_policy.h"

namespace kvscope::policy {

namespace {

class StreamingLlmPolicy final : public ScoredPolicy {
 public:
  StreamingLlmPolicy(std::string name, const PolicyParams& p, int sinks)
      : ScoredPolicy(std::move(name), p), sinks_(sinks) {}

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
  return {"streaming_llm", "attention sinks (the first tokens) plus a rolling window of the most recent tokens",
          "Xiao et al. 2024, Efficient Streaming Language Models with Attention Sinks (ICLR), §3.2",
          scored_policy_params({ParamSpec::integer("sinks", 4, 0, 1024,
                                                   "§3.2/§4: initial tokens kept as attention sinks (the paper finds 4 "
                                                   "enough); the rest of the budget is the recent window")},
                               Protocol{.block = 0, .decode_evict = true, .trim_before_output = false}),
          [](const PolicyParams& p) {
            return std::make_unique<StreamingLlmPolicy>("streaming_llm", p, p.get_int("sinks"));
          }};
}

// The plain sliding window that StreamingLLM (§3.1, Fig. 1b "window attention") and the merging papers
// (KVMerger and D2O's baselines) compare against: StreamingLLM without sinks, under its own name so
// that a comparison lists it as a method of its own.
PolicyInfo local_window_policy_info() {
  return {"local_window", "the most recent tokens only (StreamingLLM's window attention, no sinks)",
          "Xiao et al. 2024, Efficient Streaming Language Models with Attention Sinks (ICLR), §3.1 and Fig. 1b",
          scored_policy_params({}, Protocol{.block = 0, .decode_evict = true, .trim_before_output = false}),
          [](const PolicyParams& p) { return std::make_unique<StreamingLlmPolicy>("local_window", p, 0); }};
}

}  // namespace kvscope::policy
