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

#include "core/policy/diagnostics.h"
#include "core/trace/chunk_deflate.h"
#include "core/trace/trace_view.h"

namespace kvscope::trace {

struct WriterOptions {
  bool force = false;                       // overwrite an existing file
  int gzip_level = 1;                       // deflate level of chunked datasets (0: none)
  std::size_t queue_bytes = 64u << 20;      // queued payload beyond which the caller waits
};

// The fixed shape of one run, known before it starts.
struct RunLayout {
  std::string name;                              // group name under /runs, [A-Za-z0-9_.-]+
  std::map<std::string, std::string> metadata;   // written as string attributes of the run group
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int prompt_length = 0;
  int max_positions = 0;                         // prompt + max new tokens: the kept-mask position axis
  std::vector<int32_t> prompt_ids;
  std::vector<std::string> prompt_strings;
  int decode_cols = 0, decode_col_block = 1;     // decode attention rows (0 cols: not recorded)
  Pooling decode_pooling = Pooling::Max;
  bool nmse = false;
};

// Everything one engine step adds to a run.
struct StepRecord {
  StepStats stats;
  std::vector<Event> events;
  std::vector<std::vector<uint8_t>> kept;        // [layers][kv_heads * max_positions], KeptState values
  bool has_token = false;
  int32_t token = -1;
  std::string token_string;
  float logprob = 0.0f;
  std::vector<uint16_t> decode_attention;        // [layers][heads][decode_cols] half floats, decode steps only
  std::vector<float> nmse;                       // [layers], decode steps with NMSE only
};

class Hdf5Writer {
 public:
  // Creates the file before returning; throws Error naming the path when it exists (without force) or
  // cannot be created.
  explicit Hdf5Writer(const std::filesystem::path& path, const WriterOptions& options = {});
  ~Hdf5Writer();  // closes like close(), but swallows errors
  Hdf5Writer(const Hdf5Writer&) = delete;
  Hdf5Writer& operator=(const Hdf5Writer&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Milliseconds callers spent waiting for room in the queue (the writer thread fell behind).
  double blocked_ms() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return blocked_ms_;
  }

  // Returns the run's id for the calls below. Throws UsageError for a duplicate or malformed name.
  int begin_run(RunLayout layout);
  // A map dataset at `dataset` (relative to the run group, e.g. "attention/layer_03/head_00") with the
  // shape and pooling of `shape` (values ignored); rows follow with write_map_rows.
  void create_map(int run, const std::string& dataset, const Map2D& shape, const std::string& units,
                  const std::string& definition);
  void write_map_rows(int run, const std::string& dataset, int first_row, int n_rows, std::vector<uint16_t> half_values);
  // Both at once, for maps computed whole (similarity). A symmetric map may be stored as its lower
  // triangle (upper cells 0, attribute stored = "lower_triangle"), which halves what gzip has to work on.
  void write_map(int run, const std::string& dataset, const Map2D& map, const std::string& units,
                 const std::string& definition, bool lower_triangle = false);
  void write_stat(int run, const std::string& name, const LayerHeadStat& stat);
  void write_layer_stat(int run, const std::string& name, const LayerStat& stat);
  void write_series(int run, const std::string& name, const policy::Series& series);
  void write_layer_budgets(int run, const std::vector<int>& budgets);
  void append_step(int run, StepRecord record);
  // Final attributes (stop reason, timings ...) and complete = 1.
  void end_run(int run, const std::map<std::string, std::string>& final_metadata);

  // Queues a flush of everything queued so far, without waiting for it: a long prefill calls it after
  // each layer so a killed run keeps the layers it finished.
  void flush();
  // Waits until everything queued so far is written and flushed; re-throws the writer thread's first error.
  void sync();
  // Waits for the queue, closes the file and re-throws the writer thread's first error.
  void close();

 private:
  struct Task {
    std::size_t bytes = 0;
    std::function<void()> fn;
  };
  struct State;

  void post(std::size_t bytes, std::function<void()> fn);
  void thread_main();
  void rethrow_if_failed();

  std::filesystem::path path_;
  WriterOptions options_;
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
