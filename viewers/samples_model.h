#pragma once
// The Samples panel's model (issue 35): an evaluation's trace folder (`eval ruler|longbench|needle --traces DIR`)
// as a table, one row per sample file, with what `kvscope explain` computes for it (the same core functions:
// eval_run_info, read_run_evidence, evidence_in_cache, evidence_blame). Every file goes through the safe trace
// open (probe_trace) first; a file that cannot be read is a row holding its error. Sorting and filtering are
// pure functions of the rows, so they are tested without a window; SampleFolderReader reads a folder on a
// thread of its own and hands rows over as they are read, so the window never waits on a large folder.
#include <atomic>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/eval/evidence.h"
#include "core/trace/trace_probe.h"

namespace kvscope::viewers {

struct SampleRow {
  std::string path;   // the trace file
  std::string file;   // its name, as the table shows it
  std::string error;  // non-empty: the file could not be read (damaged, not a trace ...); nothing else is set
  std::string task;
  std::optional<long long> sample;  // eval_sample
  std::string policy_run, full_run;
  std::string policy;  // the policy run's "policy" and "budget" metadata, e.g. "snapkv 25%"
  std::optional<double> score, full_score;
  std::string prediction, full_prediction;
  std::vector<std::string> references;
  int first_answer_step = 0;
  // The evidence spans (nullopt: the trace holds none) and their retention when the first answer token was
  // sampled: the mean over layers and KV heads, and whether it was mostly lost (at least half the layers kept
  // under half of it: EvidenceRetention::mostly_lost).
  std::optional<std::vector<eval::EvidenceSpan>> evidence;
  std::optional<double> evidence_kept;
  bool evidence_mostly_lost = false;
  // Blame: the largest full-cache attention mass on tokens the policy had evicted, over every (layer, query
  // head), at the first divergent answer token (EvidenceBlame::max_lost_mass); nullopt when it could not be
  // computed (blame_note says why, e.g. a run recorded without q/k).
  std::optional<double> blame_mass;
  int blame_layer = -1, blame_head = -1;  // the (layer, query head) holding blame_mass
  std::string blame_note;

  bool damaged() const { return !error.empty(); }
  // The policy's answer is wrong by the evaluations' one rule (eval::answer_correct: score below one half).
  bool wrong() const;
  // Wrong although the evidence was mostly kept: the policy held what the answer needed and still failed.
  bool wrong_with_evidence_kept() const { return wrong() && evidence_kept && !evidence_mostly_lost; }
};

// Reads one sample trace: probes it in a child process, then reads its runs (no maps) and computes the row.
// Never throws for a bad file: the row carries the error.
SampleRow read_sample_row(const std::filesystem::path& trace, const trace::ProbeOptions& probe = {});

// The .h5 files directly in `dir`, sorted by name. Throws Error naming `dir` when it is not a readable folder.
std::vector<std::filesystem::path> sample_trace_files(const std::filesystem::path& dir);

enum class SampleFilter { All, Wrong, WrongEvidenceKept };
inline constexpr const char* kSampleFilterNames[] = {"all", "wrong", "wrong with the evidence kept"};

// In the table's order: the numbers that tell a failure next to the file name, then where it comes from.
enum class SampleColumn { File, Score, FullScore, EvidenceKept, Blame, Policy, Task, Sample };
inline constexpr int kSampleColumns = 8;
// The columns' headers, in SampleColumn's order; the script's `samples-sort` takes them.
inline constexpr const char* kSampleColumnNames[kSampleColumns] = {"file", "score", "full", "kept",
                                                                  "blame", "policy", "task", "#"};

// The script's names: all, wrong, wrong-kept (or kSampleFilterNames' own); column names as kSampleColumnNames
// ("sample" for "#"). UsageError naming the choices.
SampleFilter parse_sample_filter(const std::string& name);
SampleColumn parse_sample_column(const std::string& name);

// The rows the table shows, as indices into `rows`: those passing `filter`, sorted by `column` (missing values
// and damaged files last in either direction; ties keep the folder's order, by file name).
std::vector<int> sample_order(const std::vector<SampleRow>& rows, SampleFilter filter, SampleColumn column,
                              bool ascending);

// Reads a folder's sample traces one after another on its own thread. take() hands over the rows read since the
// last call; a new open() or the destructor stops the previous read after its current file.
class SampleFolderReader {
 public:
  SampleFolderReader() = default;
  ~SampleFolderReader();
  SampleFolderReader(const SampleFolderReader&) = delete;
  SampleFolderReader& operator=(const SampleFolderReader&) = delete;

  // Lists `dir` now (throws Error when it is not a folder) and returns how many files it will read.
  std::size_t open(const std::filesystem::path& dir, const trace::ProbeOptions& probe = {});
  std::vector<SampleRow> take();
  // Files still to read, or rows read and not yet taken.
  bool busy();

 private:
  void stop();
  std::thread thread_;
  std::atomic<bool> stop_{false}, busy_{false};
  std::mutex mutex_;
  std::vector<SampleRow> ready_;
};

}  // namespace kvscope::viewers
