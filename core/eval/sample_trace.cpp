#include "core/eval/sample_trace.h"

#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace kvscope::eval {

SampleTrace::SampleTrace(const std::filesystem::path& path, bool force, std::string record)
    : path_(path), record_(std::move(record)) {
  trace::WriterOptions options;
  options.force = force;
  writer_ = std::make_unique<trace::Hdf5Writer>(path, options);
}

SampleTrace::~SampleTrace() = default;

void SampleTrace::annotate(const SampleFacts& sample, const SampleRunFacts& run, const std::string& reference_run) {
  trace::Hdf5Writer& w = *writer_;
  const std::string& r = run.run_name;
  w.set_run_attribute(r, "eval_task", sample.task);
  w.set_run_attribute(r, "eval_sample", sample.index);
  w.set_run_attribute(r, "eval_score", run.score);
  w.set_run_attribute(r, "eval_prediction", run.prediction);
  w.set_run_attribute(r, "eval_references",
                      nlohmann::json(sample.references).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  w.set_run_attribute(r, "eval_role", std::string(run.policy ? "policy" : "full"));
  w.set_run_attribute(r, "eval_first_answer_step", static_cast<int64_t>(run.first_answer_step));
  w.set_run_attribute(r, "eval_prompt_tokens", static_cast<int64_t>(sample.prompt_tokens));
  w.set_run_attribute(r, "eval_appended_tokens", static_cast<int64_t>(sample.appended_tokens));
  if (!reference_run.empty()) w.set_run_attribute(r, "eval_reference_run", reference_run);

  std::vector<int32_t> positions;
  std::vector<std::string> kinds;
  for (const auto& span : sample.evidence) {
    positions.push_back(span.first);
    positions.push_back(span.last);
    kinds.push_back(span.kind);
  }
  w.write_run_dataset(r, "evidence/positions", {sample.evidence.size(), 2}, positions, {"span", "first_last"});
  w.write_run_strings(r, "evidence/kinds", kinds, "span");
  if (!run.retention) return;
  const EvidenceReport& report = *run.retention;
  const auto& kept = report.retention.kept;
  std::vector<double> flat;
  for (const auto& layer : kept) flat.insert(flat.end(), layer.begin(), layer.end());
  w.write_run_dataset(r, "evidence/kept", {kept.size(), kept.empty() ? 0 : kept[0].size()}, flat, {"layer", "kv_head"});
  // Where each evidence token first left: one row per token, -1 where it never left.
  const std::size_t n = report.departures.size();
  std::vector<int32_t> tokens, step, layer, kv_head, merged;
  for (const auto& d : report.departures) {
    tokens.push_back(d.position);
    step.push_back(d.left ? d.step : -1);
    layer.push_back(d.left ? d.layer : -1);
    kv_head.push_back(d.left ? d.kv_head : -1);
    merged.push_back(d.left ? (d.merged ? 1 : 0) : -1);
  }
  w.write_run_dataset(r, "evidence/tokens", {n}, tokens, {"token"});
  w.write_run_dataset(r, "evidence/left_step", {n}, step, {"token"});
  w.write_run_dataset(r, "evidence/left_layer", {n}, layer, {"token"});
  w.write_run_dataset(r, "evidence/left_kv_head", {n}, kv_head, {"token"});
  w.write_run_dataset(r, "evidence/left_merged", {n}, merged, {"token"});
}

void SampleTrace::keep() { writer_->close(); }

std::string sample_trace_name(const std::string& task, int64_t index) {
  std::string name;
  for (char c : task) name += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ? c : '_';
  char digits[32];
  std::snprintf(digits, sizeof digits, "_%04lld.h5", static_cast<long long>(index));
  return name + digits;
}

}  // namespace kvscope::eval
