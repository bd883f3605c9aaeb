#pragma once
// The 2 x 2 of an evaluation (issue 35, item 3): each sample with evidence is (evidence mostly kept / mostly
// lost) x (correct / wrong), counted per policy with each cell's share of the samples and a bootstrap interval,
// and the share of the policy's failures that had lost the evidence ("of SnapKV's failures at 25 %, X % had
// lost the needle in at least half the layers").
#include <optional>
#include <string>
#include <vector>

#include "core/eval/bootstrap.h"

namespace kvscope::eval {

// One rule for every evaluation (RULER, LongBench, needle), so their tables mean the same: an answer is correct
// when its score is at least one half. RULER's string_match_all then needs at least half of the expected values
// (2 of 4 for niah_multivalue), string_match_part and the needle test (0 or 1) their one value, LongBench's F1
// and Rouge-L half the reference.
inline constexpr double kCorrectScore = 0.5;
inline bool answer_correct(double score) { return score >= kCorrectScore; }
// Where `--traces-for failed` keeps a sample: wrong, or its prediction differs from the full cache's.
inline bool sample_failed(double score, const std::string& prediction, const std::string& full_prediction) {
  return !answer_correct(score) || prediction != full_prediction;
}

struct RetentionOutcome {
  bool lost = false;     // EvidenceRetention::mostly_lost(): at least half the layers kept under half of it
  bool correct = false;  // answer_correct(score)
};

struct RetentionCell {
  int count = 0;
  Interval share;  // of all samples with evidence: the mean of the cell's 0/1 indicator and its interval
};

struct RetentionTable {
  int samples = 0;  // with evidence
  // [lost][correct]: kept_wrong = cells[0][0], kept_correct = cells[0][1], lost_wrong = [1][0], lost_correct = [1][1]
  RetentionCell cells[2][2];
  // Among the wrong answers, the share that had lost the evidence; nothing without a wrong answer.
  std::optional<Interval> failures_lost;
  // Among the correct answers, the share that had lost it (answered anyway); nothing without a correct one.
  std::optional<Interval> correct_lost;
};

// No outcomes: an empty table (samples 0, shares without intervals).
RetentionTable retention_table(const std::vector<RetentionOutcome>& outcomes, const BootstrapSettings& settings);

// "of <policy>'s failures, X % had lost the evidence in at least half the layers [low, high]" (percent), or a
// sentence saying there were no failures with evidence.
std::string failures_sentence(const std::string& policy, const RetentionTable& table, double level);

}  // namespace kvscope::eval
