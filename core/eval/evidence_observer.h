#pragma once
// Watches one evaluation run for its evidence (issue 35, item 3): the share of evidence tokens each (layer, KV
// head) still holds at the end of the step that samples the first answer token (the cache through which the
// answer is produced), and, for every evidence token, the first step, layer and KV head at which an edit
// evicted it or merged it away. Step numbers are rows of a trace's steps/ (docs/trace-format.md): the prefill
// blocks first, then the decode steps; the first answer token's step is n_prefill_blocks - 1 + n_appended.
#include <optional>
#include <vector>

#include "core/engine/run_observer.h"
#include "core/eval/evidence.h"
#include "core/eval/evidence_retention.h"

namespace kvscope::eval {

// Where an evidence token first left the cache (the earliest step; within it, the first edit that removed it).
struct EvidenceDeparture {
  int position = 0;
  bool left = false;  // false: never evicted or merged away during the run (the fields below are -1)
  int step = -1, layer = -1, kv_head = -1;
  bool merged = false;  // merged into another entry rather than evicted
};

// What an evaluation keeps of a run's evidence: the spans, the retention at the first answer token's step, and
// where each token first left.
struct EvidenceReport {
  std::vector<EvidenceSpan> spans;
  EvidenceRetention retention;
  int first_answer_step = -1;
  std::vector<EvidenceDeparture> departures;
};

class EvidenceObserver : public engine::RunObserver {
 public:
  // appended_tokens: tokens fed after the prompt before the answer (the query-agnostic question), so the first
  // answer token is the (appended_tokens + 1)-th token the run samples.
  EvidenceObserver(const std::vector<EvidenceSpan>& spans, int appended_tokens, int n_layers, int n_kv_heads);

  void on_edit(const cache::CacheEdit& edit, const cache::KVCache& before, const observation::StepInfo& step) override;
  void on_step_end(const observation::StepInfo& step, const cache::KVCache& cache, int token, float logprob) override;

  const std::vector<int>& positions() const { return positions_; }
  // Set once the first answer token's step ended when there is evidence.
  const std::optional<EvidenceRetention>& retention() const { return retention_; }
  int first_answer_step() const { return first_answer_step_; }  // -1 until then (with or without evidence)
  // One per evidence position, in position order.
  const std::vector<EvidenceDeparture>& departures() const { return departures_; }
  // Everything above once the retention is known; nothing for a run without evidence or one that ended
  // before its first answer token.
  std::optional<EvidenceReport> report() const;

 private:
  std::vector<EvidenceSpan> spans_;
  std::vector<int> positions_;
  int appended_, n_layers_, n_kv_heads_;
  int steps_ended_ = 0, tokens_sampled_ = 0, first_answer_step_ = -1;
  std::optional<EvidenceRetention> retention_;
  std::vector<EvidenceDeparture> departures_;
};

}  // namespace kvscope::eval
