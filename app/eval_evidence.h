#pragma once
// How `kvscope eval ruler|longbench|needle` report evidence retention (issue 35): the fields of one --json
// record, the per-policy 2 x 2 of (evidence mostly kept / lost) x (correct / wrong) in JSON and as a table, and
// --traces DIR: one trace file per sample that failed (or every sample).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/eval/bootstrap.h"
#include "core/eval/evidence_observer.h"
#include "core/eval/retention_table.h"
#include "core/eval/sample_trace.h"

namespace kvscope::app {

// A record's evidence fields: evidence (the spans), evidence_tokens, evidence_kept, evidence_kept_min_layer
// {"layer", "kept"}, evidence_layers_mostly_lost, evidence_mostly_lost and evidence_first_left (per token
// {"position", "step", "layer", "kv_head", "merged"}, null fields where it never left). A sample without
// evidence gets evidence [] and null for the rest: nothing is reported as kept when nothing was measured.
void add_evidence_fields(nlohmann::json& record, const std::vector<eval::EvidenceSpan>& spans,
                         const std::optional<eval::EvidenceReport>& report);

// Collects a policy's samples into the 2 x 2 (samples without evidence are counted apart, not in the cells).
class RetentionSummary {
 public:
  void add(const std::optional<eval::EvidenceReport>& report, double score);
  // One sample from its stored facts: mostly_lost (EvidenceRetention::mostly_lost), nothing without evidence.
  void add(std::optional<bool> mostly_lost, double score);
  // {"correct_if": "score >= 0.5", "samples", "without_evidence", "cells": {"kept_correct": {"count", "share",
  // "ci_low", "ci_high"}, "kept_wrong", "lost_correct", "lost_wrong"}, "failures_lost": {...} | null,
  // "correct_lost": {...} | null, "sentence"}; shares as fractions 0..1.
  nlohmann::json json(const std::string& policy, const eval::BootstrapSettings& settings) const;
  // The table under an evaluation's scores.
  void print(const std::string& policy, const eval::BootstrapSettings& settings) const;

 private:
  std::vector<eval::RetentionOutcome> outcomes_;
  int without_evidence_ = 0;
};

// --traces DIR, --traces-for failed|all, --traces-record SPEC, and the hidden test hook --test-evidence.
struct TraceOptions {
  std::string dir;
  std::string traces_for = "failed";
  std::string record = eval::kSampleTraceRecord;
  std::string test_evidence;  // "first-last:kind;..." given to every sample instead of its own (tests only)

  void add_to(CLI::App* cmd);
  bool enabled() const { return !dir.empty(); }
  // Checks the flags and creates DIR (and its parents) when missing; UsageError naming what is wrong.
  void prepare() const;
  // DIR/name, refused (before any run) when it exists and !force.
  std::filesystem::path sample_path(const std::string& name, bool force) const;
  // A sample's trace, or nothing without --traces.
  std::unique_ptr<eval::SampleTrace> open(const std::filesystem::path& path, bool force) const;
  // Whether a sample's trace is kept: every one with --traces-for all, else a failed one (eval::sample_failed).
  bool keeps(double score, const std::string& prediction, const std::string& full_prediction) const;
  // The end of a sample's trace: when keeps(policy run's score, its prediction, the full run's), annotates the
  // runs (the full run first, when there is one: a full-cache evaluation has one run) and puts the file in
  // place, record["trace"] = its path; otherwise abandons it (no file), record["trace"] = null.
  void finish(eval::SampleTrace& trace, const eval::SampleFacts& sample, const eval::SampleRunFacts& policy,
              const std::optional<eval::SampleRunFacts>& full, nlohmann::json& record) const;
  // The spans a sample runs with: --test-evidence's when given, else its own.
  std::vector<eval::EvidenceSpan> evidence_for(const std::vector<eval::EvidenceSpan>& own) const;
};

}  // namespace kvscope::app
