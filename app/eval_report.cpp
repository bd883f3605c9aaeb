#include "app/eval_report.h"

#include <cstdio>

namespace kvscope::app {

nlohmann::json interval_json(const eval::Interval& ci) {
  return {{"score", 100.0 * ci.mean}, {"ci_low", 100.0 * ci.low}, {"ci_high", 100.0 * ci.high}, {"n", ci.n}};
}

nlohmann::json scored_group_json(const std::vector<double>& scores, const std::vector<double>& full,
                                 const eval::BootstrapSettings& settings) {
  nlohmann::json group = interval_json(eval::bootstrap_mean(scores, settings));
  if (!full.empty()) {
    group["full"] = interval_json(eval::bootstrap_mean(full, settings));
    group["difference"] = interval_json(eval::bootstrap_paired_difference(scores, full, settings));
  }
  return group;
}

nlohmann::json bootstrap_json(const eval::BootstrapSettings& settings) {
  return {{"resamples", settings.resamples}, {"level", settings.level}, {"seed", settings.seed}};
}

void print_scored_group(const std::string& name, const nlohmann::json& group, int name_width, bool show_n) {
  std::printf("  %-*s %6.2f  [%6.2f, %6.2f]", name_width, name.c_str(), group["score"].get<double>(),
              group["ci_low"].get<double>(), group["ci_high"].get<double>());
  if (show_n) std::printf("  n=%d", group["n"].get<int>());
  if (group.contains("difference"))
    std::printf("   full %6.2f, difference %+6.2f [%+.2f, %+.2f]", group["full"]["score"].get<double>(),
                group["difference"]["score"].get<double>(), group["difference"]["ci_low"].get<double>(),
                group["difference"]["ci_high"].get<double>());
  std::printf("\n");
}

nlohmann::json evidence_json(const std::vector<eval::EvidenceSpan>& spans) {
  nlohmann::json out = nlohmann::json::array();
  for (const eval::EvidenceSpan& span : spans) out.push_back({span.first, span.last, span.kind});
  return out;
}

void add_paged_fields(nlohmann::json& record, const eval::CacheMemory& memory) {
  if (memory.page_tokens <= 0) return;
  record["cache_entry_bytes"] = memory.entry_bytes;
  record["cache_paged_bytes"] = memory.paged_bytes;
  record["cache_paged_peak_bytes"] = memory.paged_peak_bytes;
}

}  // namespace kvscope::app
