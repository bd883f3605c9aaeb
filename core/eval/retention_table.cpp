#include "core/eval/retention_table.h"

#include <cstdio>

namespace kvscope::eval {

RetentionTable retention_table(const std::vector<RetentionOutcome>& outcomes, const BootstrapSettings& settings) {
  RetentionTable t;
  t.samples = static_cast<int>(outcomes.size());
  if (outcomes.empty()) return t;
  for (int lost = 0; lost < 2; ++lost)
    for (int correct = 0; correct < 2; ++correct) {
      std::vector<double> indicator;
      indicator.reserve(outcomes.size());
      for (const auto& o : outcomes)
        indicator.push_back(o.lost == (lost == 1) && o.correct == (correct == 1) ? 1.0 : 0.0);
      RetentionCell& cell = t.cells[lost][correct];
      cell.share = bootstrap_mean(indicator, settings);
      for (double x : indicator) cell.count += x > 0.5;
    }
  std::vector<double> wrong_lost, right_lost;
  for (const auto& o : outcomes) (o.correct ? right_lost : wrong_lost).push_back(o.lost ? 1.0 : 0.0);
  if (!wrong_lost.empty()) t.failures_lost = bootstrap_mean(wrong_lost, settings);
  if (!right_lost.empty()) t.correct_lost = bootstrap_mean(right_lost, settings);
  return t;
}

std::string failures_sentence(const std::string& policy, const RetentionTable& table, double level) {
  if (!table.failures_lost)
    return "no failures of " + policy + " on samples with evidence (" + std::to_string(table.samples) + " samples)";
  const Interval& f = *table.failures_lost;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "of %s's failures, %.0f %% had lost the evidence in at least half the layers [%.0f, %.0f] "
                "(%d of %d, %.0f %% bootstrap interval)",
                policy.c_str(), 100.0 * f.mean, 100.0 * f.low, 100.0 * f.high, table.cells[1][0].count, f.n,
                100.0 * level);
  return buf;
}

}  // namespace kvscope::eval
