#include "viewers/samples_model.h"

#include <algorithm>
#include <cmath>

#include "core/common/error.h"
#include "core/eval/evidence_retention.h"
#include "core/eval/retention_table.h"
#include "core/trace/eval_run_info.h"
#include "core/trace/evidence_blame.h"
#include "core/trace/evidence_in_cache.h"
#include "core/trace/hdf5_reader.h"
#include "core/trace/run_evidence.h"

namespace kvscope::viewers {

bool SampleRow::wrong() const { return !damaged() && score && !eval::answer_correct(*score); }

SampleRow read_sample_row(const std::filesystem::path& path, const trace::ProbeOptions& probe) {
  SampleRow row;
  row.path = path.string();
  row.file = path.filename().string();
  try {
    // A damaged file must not take the window down: its metadata is walked in a child process first.
    trace::probe_trace(path, probe);
    trace::ReadOptions options;
    options.maps = false;  // blame needs the q/k, retention the kept masks; the maps are the bulk of a file
    const trace::TraceView view = trace::read_trace(path, options);
    const trace::RunTrace& policy = trace::default_policy_run(view);
    const trace::RunTrace& full = trace::reference_run(view, policy);
    const trace::EvalRunInfo pi = trace::eval_run_info(policy), fi = trace::eval_run_info(full);
    row.policy_run = policy.name;
    row.full_run = full.name;
    row.policy = policy.meta("policy", policy.name);
    if (const std::string budget = policy.meta("budget"); !budget.empty()) row.policy += " " + budget;
    row.task = pi.task;
    row.sample = pi.sample;
    row.score = pi.score;
    row.full_score = fi.score;
    row.prediction = pi.from_evaluation ? pi.prediction : trace::answer_text(policy, pi);
    row.full_prediction = fi.from_evaluation ? fi.prediction : trace::answer_text(full, fi);
    row.references = pi.references;
    row.first_answer_step = pi.first_answer_step;
    row.evidence = trace::read_run_evidence(path, policy.name);
    std::vector<int> positions;
    if (row.evidence) {
      positions = eval::evidence_positions(*row.evidence);
      const eval::EvidenceRetention r = trace::evidence_in_cache(policy, positions, pi.first_answer_step);
      row.evidence_kept = r.mean;
      row.evidence_mostly_lost = r.mostly_lost();
    }
    try {
      const trace::EvidenceBlame b = trace::evidence_blame(policy, pi, full, fi, positions);
      const std::vector<trace::HeadBlame> top = b.largest(1);
      if (!top.empty() && !std::isnan(top.front().lost_mass)) {
        row.blame_mass = top.front().lost_mass;
        row.blame_layer = top.front().layer;
        row.blame_head = top.front().head;
      }
    } catch (const std::exception& e) {
      row.blame_note = e.what();  // the row stays useful without blame (a run recorded without q/k)
    }
  } catch (const std::exception& e) {
    SampleRow bad;
    bad.path = row.path;
    bad.file = row.file;
    bad.error = e.what();
    return bad;
  }
  return row;
}

std::vector<std::filesystem::path> sample_trace_files(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw Error("'" + dir.string() + "' is not a folder (open the folder `eval ... --traces DIR` wrote)");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".h5" && e.is_regular_file(ec)) files.push_back(e.path());
  if (ec) throw Error("cannot list folder '" + dir.string() + "': " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

namespace {

bool passes(const SampleRow& r, SampleFilter filter) {
  switch (filter) {
    case SampleFilter::All:
      return true;
    case SampleFilter::Wrong:
      return r.wrong();
    case SampleFilter::WrongEvidenceKept:
      return r.wrong_with_evidence_kept();
  }
  return true;
}

// A row's value in a numeric column; nullopt: missing (sorted last).
std::optional<double> number(const SampleRow& r, SampleColumn c) {
  if (r.damaged()) return std::nullopt;
  switch (c) {
    case SampleColumn::Sample:
      return r.sample ? std::optional<double>(static_cast<double>(*r.sample)) : std::nullopt;
    case SampleColumn::Score:
      return r.score;
    case SampleColumn::FullScore:
      return r.full_score;
    case SampleColumn::EvidenceKept:
      return r.evidence_kept;
    case SampleColumn::Blame:
      return r.blame_mass;
    default:
      return std::nullopt;
  }
}

const std::string* text(const SampleRow& r, SampleColumn c) {
  switch (c) {
    case SampleColumn::File:
      return &r.file;
    case SampleColumn::Task:
      return r.damaged() ? nullptr : &r.task;
    case SampleColumn::Policy:
      return r.damaged() ? nullptr : &r.policy;
    default:
      return nullptr;
  }
}

}  // namespace

SampleFilter parse_sample_filter(const std::string& name) {
  if (name == "all" || name == kSampleFilterNames[0]) return SampleFilter::All;
  if (name == "wrong" || name == kSampleFilterNames[1]) return SampleFilter::Wrong;
  if (name == "wrong-kept" || name == kSampleFilterNames[2]) return SampleFilter::WrongEvidenceKept;
  throw UsageError("samples filter '" + name + "': expected all, wrong or wrong-kept (wrong with the evidence kept)");
}

SampleColumn parse_sample_column(const std::string& name) {
  for (int c = 0; c < kSampleColumns; ++c)
    if (name == kSampleColumnNames[c]) return static_cast<SampleColumn>(c);
  if (name == "sample") return SampleColumn::Sample;
  std::string names;
  for (const char* n : kSampleColumnNames) names += (names.empty() ? "" : ", ") + std::string(n);
  throw UsageError("samples column '" + name + "': expected one of " + names + " (or sample)");
}

std::vector<int> sample_order(const std::vector<SampleRow>& rows, SampleFilter filter, SampleColumn column,
                              bool ascending) {
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(rows.size()); ++i)
    if (passes(rows[static_cast<std::size_t>(i)], filter)) order.push_back(i);
  const bool textual = column == SampleColumn::File || column == SampleColumn::Task || column == SampleColumn::Policy;
  std::stable_sort(order.begin(), order.end(), [&](int ia, int ib) {
    const SampleRow &a = rows[static_cast<std::size_t>(ia)], &b = rows[static_cast<std::size_t>(ib)];
    if (textual) {
      const std::string *ta = text(a, column), *tb = text(b, column);
      if (!ta || !tb) return ta && !tb;  // missing last
      return ascending ? *ta < *tb : *tb < *ta;
    }
    const auto va = number(a, column), vb = number(b, column);
    if (!va || !vb) return va && !vb;
    return ascending ? *va < *vb : *vb < *va;
  });
  return order;
}

SampleFolderReader::~SampleFolderReader() { stop(); }

void SampleFolderReader::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  stop_ = false;
}

std::size_t SampleFolderReader::open(const std::filesystem::path& dir, const trace::ProbeOptions& probe) {
  const std::vector<std::filesystem::path> files = sample_trace_files(dir);
  stop();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.clear();
  }
  busy_ = true;
  thread_ = std::thread([this, files, probe] {
    for (const auto& f : files) {
      if (stop_) break;
      SampleRow row = read_sample_row(f, probe);
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.push_back(std::move(row));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    busy_ = false;
  });
  return files.size();
}

bool SampleFolderReader::busy() {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_ || !ready_.empty();
}

std::vector<SampleRow> SampleFolderReader::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<SampleRow> out;
  out.swap(ready_);
  return out;
}

}  // namespace kvscope::viewers
