#include "app/eval_evidence.h"

#include <cstdio>
#include <system_error>

#include "app/eval_report.h"
#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "core/trace/recorder.h"

namespace kvscope::app {

namespace {
nlohmann::json or_null(bool set, int value) { return set ? nlohmann::json(value) : nlohmann::json(nullptr); }
}  // namespace

void add_evidence_fields(nlohmann::json& record, const std::vector<eval::EvidenceSpan>& spans,
                         const std::optional<eval::EvidenceReport>& report) {
  record["evidence"] = evidence_json(spans);
  if (!report) {
    for (const char* key : {"evidence_tokens", "evidence_kept", "evidence_kept_min_layer",
                            "evidence_layers_mostly_lost", "evidence_mostly_lost", "evidence_first_left"})
      record[key] = nullptr;
    return;
  }
  const eval::EvidenceRetention& r = report->retention;
  record["evidence_tokens"] = report->departures.size();
  record["evidence_kept"] = r.mean;
  record["evidence_kept_min_layer"] = {{"layer", r.min_layer}, {"kept", r.min_layer_kept}};
  record["evidence_layers_mostly_lost"] = r.layers_mostly_lost;
  record["evidence_mostly_lost"] = r.mostly_lost();
  nlohmann::json left = nlohmann::json::array();
  for (const auto& d : report->departures)
    left.push_back({{"position", d.position},
                    {"step", or_null(d.left, d.step)},
                    {"layer", or_null(d.left, d.layer)},
                    {"kv_head", or_null(d.left, d.kv_head)},
                    {"merged", d.left ? nlohmann::json(d.merged) : nlohmann::json(nullptr)}});
  record["evidence_first_left"] = std::move(left);
}

void RetentionSummary::add(const std::optional<eval::EvidenceReport>& report, double score) {
  add(report ? std::optional<bool>(report->retention.mostly_lost()) : std::nullopt, score);
}

void RetentionSummary::add(std::optional<bool> mostly_lost, double score) {
  if (!mostly_lost) {
    ++without_evidence_;
    return;
  }
  outcomes_.push_back({*mostly_lost, eval::answer_correct(score)});
}

namespace {
nlohmann::json share_json(const eval::Interval& ci) {
  return {{"share", ci.mean}, {"ci_low", ci.low}, {"ci_high", ci.high}, {"n", ci.n}};
}
}  // namespace

nlohmann::json RetentionSummary::json(const std::string& policy, const eval::BootstrapSettings& settings) const {
  const eval::RetentionTable t = eval::retention_table(outcomes_, settings);
  nlohmann::json cells = nlohmann::json::object();
  const char* names[2][2] = {{"kept_wrong", "kept_correct"}, {"lost_wrong", "lost_correct"}};
  for (int lost = 0; lost < 2; ++lost)
    for (int correct = 0; correct < 2; ++correct) {
      const eval::RetentionCell& c = t.cells[lost][correct];
      nlohmann::json cell = {{"count", c.count}};
      if (t.samples > 0) cell.update(share_json(c.share));
      cells[names[lost][correct]] = std::move(cell);
    }
  char rule[32];
  std::snprintf(rule, sizeof rule, "score >= %g", eval::kCorrectScore);
  return {{"correct_if", rule},
          {"lost_if", "the evidence is under half kept in at least half the layers"},
          {"samples", t.samples},
          {"without_evidence", without_evidence_},
          {"cells", cells},
          {"failures_lost", t.failures_lost ? share_json(*t.failures_lost) : nlohmann::json(nullptr)},
          {"correct_lost", t.correct_lost ? share_json(*t.correct_lost) : nlohmann::json(nullptr)},
          {"sentence", eval::failures_sentence(policy, t, settings.level)}};
}

void RetentionSummary::print(const std::string& policy, const eval::BootstrapSettings& settings) const {
  if (outcomes_.empty()) {
    if (without_evidence_ > 0)
      std::printf("evidence retention: no sample has evidence spans (%d without)\n", without_evidence_);
    return;
  }
  const eval::RetentionTable t = eval::retention_table(outcomes_, settings);
  std::printf(
      "evidence at the first answer token, %d samples (correct: score >= %g; lost: under half kept in at "
      "least half the layers)%s\n",
      t.samples, eval::kCorrectScore,
      without_evidence_ ? (", " + std::to_string(without_evidence_) + " without evidence").c_str() : "");
  auto cell = [&](int lost, int correct) {
    const eval::RetentionCell& c = t.cells[lost][correct];
    std::printf("  %4d  %5.1f%% [%5.1f, %5.1f]", c.count, 100.0 * c.share.mean, 100.0 * c.share.low,
                100.0 * c.share.high);
  };
  std::printf("  %-14s  %-27s  %-27s\n", "", "correct", "wrong");
  std::printf("  %-14s", "mostly kept");
  cell(0, 1), cell(0, 0);
  std::printf("\n  %-14s", "mostly lost");
  cell(1, 1), cell(1, 0);
  std::printf("\n  %s\n", eval::failures_sentence(policy, t, settings.level).c_str());
}

void TraceOptions::add_to(CLI::App* cmd) {
  cmd->add_option("--traces", dir,
                  "write one HDF5 trace per sample into this folder (created if missing): the policy's run and the "
                  "full cache's run, with the evidence and the score (docs/evaluation.md)");
  cmd->add_option("--traces-for", traces_for,
                  "failed (default: samples the policy got wrong or where its answer differs from the full "
                  "cache's) or all");
  cmd->add_option("--traces-record", record,
                  "what the sample traces record (`kvscope trace --record`; default '" +
                      std::string(eval::kSampleTraceRecord) + "')");
  // Tests measure retention on spans they compute themselves, before every generator marks its evidence.
  cmd->add_option("--test-evidence", test_evidence, "evidence spans 'first-last:kind;...' for every sample (tests)")
      ->group("");
}

void TraceOptions::prepare() const {
  if (traces_for != "failed" && traces_for != "all")
    throw UsageError("--traces-for '" + traces_for + "': expected failed or all");
  evidence_for({});  // a malformed --test-evidence fails before the model loads
  if (!enabled()) return;
  trace::RecordOptions::parse(record);
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    throw UsageError("--traces '" + dir + "' exists and is not a folder");
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UsageError("--traces: cannot create the folder '" + dir + "': " + ec.message());
}

std::filesystem::path TraceOptions::sample_path(const std::string& name, bool force) const {
  const std::filesystem::path path = std::filesystem::path(dir) / name;
  check_output_path(path, existing_policy(force), "trace file");
  return path;
}

std::unique_ptr<eval::SampleTrace> TraceOptions::open(const std::filesystem::path& path, bool force) const {
  if (!enabled()) return nullptr;
  return std::make_unique<eval::SampleTrace>(path, force, record);
}

bool TraceOptions::keeps(double score, const std::string& prediction, const std::string& full_prediction) const {
  return traces_for == "all" || eval::sample_failed(score, prediction, full_prediction);
}

void TraceOptions::finish(eval::SampleTrace& trace, const eval::SampleFacts& sample, const eval::SampleRunFacts& policy,
                          const std::optional<eval::SampleRunFacts>& full, nlohmann::json& record) const {
  if (!keeps(policy.score, policy.prediction, full ? full->prediction : policy.prediction)) {
    record["trace"] = nullptr;
    return;  // the SampleTrace's destructor abandons the file
  }
  if (full) trace.annotate(sample, *full, "");
  trace.annotate(sample, policy, full ? full->run_name : "");
  trace.keep();
  record["trace"] = trace.path().string();
}

std::vector<eval::EvidenceSpan> TraceOptions::evidence_for(const std::vector<eval::EvidenceSpan>& own) const {
  if (test_evidence.empty()) return own;
  std::vector<eval::EvidenceSpan> spans;
  std::size_t at = 0;
  while (at <= test_evidence.size()) {
    const std::size_t end = std::min(test_evidence.find(';', at), test_evidence.size());
    const std::string item = test_evidence.substr(at, end - at);
    at = end + 1;
    if (item.empty()) continue;
    eval::EvidenceSpan span;
    int used = 0;
    if (std::sscanf(item.c_str(), "%d-%d%n", &span.first, &span.last, &used) != 2 || span.first < 0 ||
        span.last < span.first || (item[used] != ':' && item[used] != '\0'))
      throw UsageError("--test-evidence '" + item + "': expected FIRST-LAST[:KIND] with 0 <= FIRST <= LAST");
    span.kind = item[used] == ':' && item.size() > static_cast<std::size_t>(used) + 1 ? item.substr(used + 1) : "test";
    spans.push_back(span);
  }
  return spans;
}

}  // namespace kvscope::app
