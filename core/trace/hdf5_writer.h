#pragma once
// Writes traces in the layout of docs/trace-format.md. Every HDF5 call happens on one writer thread; the
// caller (the engine thread, through the Recorder) only queues records, and blocks only while the
// bounded queue is full. The first error on the writer thread is re-thrown to the caller at its next
// call (and by close()), so a failing disk stops the run instead of silently losing data.
//
// Crash safety: a run is created with complete = 0 and set to 1 by end_run; the file is flushed after
// every step, so a killed process leaves a file the reader opens with a warning.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/common/atomic_file.h"
#include "core/policy/diagnostics.h"
#include "core/trace/chunk_deflate.h"
#include "core/trace/trace_sink.h"
#include "core/trace/trace_view.h"

namespace kvscope::trace {

struct WriterOptions {
  bool force = false;                       // overwrite an existing file
  int gzip_level = 1;                       // deflate level of chunked datasets (0: none)
  std::size_t queue_bytes = 64u << 20;      // queued payload beyond which the caller waits
};

// The file is written through an AtomicFile (core/common/atomic_file.h): created in a private folder beside
// the target, `.NAME.kvscope-XXXXXX.tmp/NAME`, and renamed to PATH by a successful close(): until then an
// existing PATH is untouched, and a writer destroyed without close() (a run that failed) removes its
// temporary file. A process killed mid-write leaves that folder, whose file reads as a trace with its last
// run incomplete. With force, close() replaces PATH (a link at PATH is replaced, never written through);
// without it, close() refuses a PATH that appeared during the run.
class Hdf5Writer final : public TraceSink {
 public:
  // Creates the temporary file before returning; throws Error naming the path when PATH exists (without
  // force) or the file cannot be created.
  explicit Hdf5Writer(const std::filesystem::path& path, const WriterOptions& options = {});
  ~Hdf5Writer();  // without close(): abandons the file (the temporary one is removed, PATH untouched)
  Hdf5Writer(const Hdf5Writer&) = delete;
  Hdf5Writer& operator=(const Hdf5Writer&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Where the file is written until close() puts it at path().
  std::filesystem::path temp_path() const { return file_.temp_path(); }
  // Milliseconds callers spent waiting for room in the queue (the writer thread fell behind).
  double blocked_ms() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return blocked_ms_;
  }

  // TraceSink. begin_run throws UsageError for a duplicate or malformed name. Map rows are converted to
  // float16 and packed into compressed chunks on the caller's thread; the writer thread only stores them.
  int begin_run(RunLayout layout) override;
  void create_map(int run, const MapSlot& slot, const Map2D& shape, const std::string& units,
                  const std::string& definition) override;
  void write_map_rows(int run, const MapSlot& slot, int first_row, int n_rows, std::span<const float> values) override;
  void write_map(int run, const MapSlot& slot, const Map2D& map, const std::string& units, const std::string& definition,
                 bool lower_triangle = false) override;
  void write_stat(int run, const std::string& name, const LayerHeadStat& stat) override;
  void write_layer_stat(int run, const std::string& name, const LayerStat& stat) override;
  void write_series(int run, const std::string& name, const policy::Series& series) override;
  void write_layer_budgets(int run, const std::vector<int>& budgets) override;
  void append_step(int run, StepRecord record) override;
  void append_qk(int run, const QKSpanRef& span) override;
  // Final attributes (stop reason, timings ...) and complete = 1.
  void end_run(int run, const std::map<std::string, std::string>& final_metadata) override;

  // What a caller adds to a run it knows by name (begun by a recorder, possibly ended): typed attributes and
  // small datasets under the run's group, e.g. an evaluation's eval_* attributes and evidence/ (issue 35).
  // `path` is relative to the run ("evidence/kept"); its groups are created. Throws UsageError for a run this
  // writer never began; HDF5 failures surface like every other write (at the next call or close()).
  void set_run_attribute(const std::string& run, const std::string& name, const std::string& value);
  void set_run_attribute(const std::string& run, const std::string& name, int64_t value);
  void set_run_attribute(const std::string& run, const std::string& name, double value);
  // Row-major values of shape `dims` (their product must equal values.size()), dimension labels `labels`.
  void write_run_dataset(const std::string& run, const std::string& path, const std::vector<std::size_t>& dims,
                         const std::vector<int32_t>& values, const std::vector<std::string>& labels);
  void write_run_dataset(const std::string& run, const std::string& path, const std::vector<std::size_t>& dims,
                         const std::vector<double>& values, const std::vector<std::string>& labels);
  // A 1-D fixed-length UTF-8 string dataset as wide as its longest value (the trace's string convention).
  void write_run_strings(const std::string& run, const std::string& path, const std::vector<std::string>& values,
                         const std::string& label);

  // Queues a flush of everything queued so far, without waiting for it: a long prefill calls it after
  // each layer so a killed run keeps the layers it finished.
  void flush() override;
  // Waits until everything queued so far is written and flushed; re-throws the writer thread's first error.
  void sync();
  // Waits for the queue, closes the file and puts it in place at PATH; re-throws the writer thread's first
  // error (and removes the temporary file) when any write failed.
  void close();

 private:
  struct Task {
    std::size_t bytes = 0;
    std::function<void()> fn;
  };
  struct State;

  void post(std::size_t bytes, std::function<void()> fn);
  int run_id(const std::string& run) const;  // UsageError for a name begin_run never saw
  enum class ElementType { Int32, Float64, FixedString };
  // Queues a dataset at `path` under the run; `data` holds its row-major bytes (strings: `string_width` bytes
  // each, null-padded).
  void write_run_bytes(const std::string& run, const std::string& path, std::vector<std::size_t> dims,
                       std::vector<char> data, ElementType type, std::size_t string_width,
                       std::vector<std::string> labels);
  template <typename T>
  void set_run_attribute_of(const std::string& run, const std::string& name, T value);
  void thread_main();
  void rethrow_if_failed();

  std::filesystem::path path_;
  WriterOptions options_;
  AtomicFile file_;  // created before the writer thread starts; committed by close()
  std::unique_ptr<State> state_;  // HDF5 handles; touched only by the writer thread
  std::vector<std::string> run_names_;
  // Chunk layouts of the maps receiving rows, by (run, dataset), for packing on the caller's thread.
  std::map<std::pair<int, std::string>, h5::ChunkLayout> map_layouts_;

  mutable std::mutex mutex_;
  std::condition_variable not_empty_, not_full_;
  std::deque<Task> queue_;
  std::size_t queued_bytes_ = 0;
  double blocked_ms_ = 0.0;
  bool stopping_ = false;
  std::string error_;  // first failure on the writer thread
  std::thread thread_;
  bool closed_ = false;
};

// Converts floats to half bits (round to nearest even).
std::vector<uint16_t> to_half(const float* values, std::size_t n);

}  // namespace kvscope::trace
