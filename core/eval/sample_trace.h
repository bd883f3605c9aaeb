#pragma once
// One evaluation sample's trace (eval ruler|longbench|needle --traces DIR, issue 35): an HDF5 file holding the
// policy's run and the full cache's run of the sample, each with its eval_* attributes and evidence/ group
// (docs/trace-format.md, "Evaluation runs"). The file is written through the trace writer's AtomicFile: it
// appears at its path only when keep() is called, and a sample that turns out not to need one (--traces-for
// failed, the policy right and agreeing with the full cache) is abandoned: its temporary file is removed.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/eval/eval_run.h"
#include "core/eval/evidence.h"
#include "core/eval/evidence_observer.h"
#include "core/trace/hdf5_writer.h"

namespace kvscope::eval {

// What an evaluation records by default: exact attention (qk=on), maps pooled to 64 x 64, no key/value
// similarity maps (docs/evaluation.md gives the size per 1K tokens).
inline constexpr const char* kSampleTraceRecord = "qk=on;size=64;similarity=off";

struct SampleFacts {
  std::string task;  // RULER task, LongBench dataset, or "needle"
  int64_t index = 0;
  std::vector<std::string> references;  // the expected answers
  int prompt_tokens = 0, appended_tokens = 0;
  std::vector<EvidenceSpan> evidence;
};

struct SampleRunFacts {
  std::string run_name;
  bool policy = true;  // the policy's run ("policy"), or the full cache's ("full")
  double score = 0.0;
  std::string prediction;
  int first_answer_step = -1;
  std::optional<EvidenceReport> retention;  // written to evidence/ when set
};

class SampleTrace {
 public:
  // Creates the temporary file; throws Error naming the path when it exists and !force.
  SampleTrace(const std::filesystem::path& path, bool force, std::string record);
  ~SampleTrace();  // without keep(): abandons the file

  const std::filesystem::path& path() const { return path_; }
  TraceTarget target() { return {writer_.get(), record_}; }

  // After the run ended: its eval_* attributes and /runs/<run>/evidence/ (positions, kinds and, with a retention,
  // kept and where each token first left). reference_run: the full cache's run, named on a policy run that is
  // not itself full (eval_reference_run); empty: none.
  void annotate(const SampleFacts& sample, const SampleRunFacts& run, const std::string& reference_run);
  // Closes the file and puts it at path() (refused when it appeared meanwhile and !force).
  void keep();

 private:
  std::filesystem::path path_;
  std::string record_;
  std::unique_ptr<trace::Hdf5Writer> writer_;
};

// The file name of a sample's trace: "<task>_<index:04d>.h5" with characters outside [A-Za-z0-9_.-] as '_'.
std::string sample_trace_name(const std::string& task, int64_t index);

}  // namespace kvscope::eval
