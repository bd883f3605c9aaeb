#pragma once
// Runs the model for the window, never on the UI thread (Tracy's worker/view split, ImHex's task
// manager). One worker thread owns the model and executes run requests in order; a newer request for
// the same slot cancels the one in flight (RunHooks::cancel), so a dragged budget slider only ever
// computes its latest value. Results are immutable RunTrace snapshots handed to the UI thread by poll().
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/eval/eval_run.h"
#include "core/eval/sweep_store.h"
#include "core/trace/trace_view.h"

namespace kvscope::model {
struct Model;
}
namespace kvscope::trace {
class LiveTrace;
}
namespace kvscope::run {
class PrefillStore;
}

namespace kvscope::viewers {

// The slot the set-up form runs in: it goes ahead of every other queued run.
inline constexpr const char* kLiveSlot = "live";
// The slot of a sweep run from the window (Quality panel): in the background, behind live runs.
inline constexpr const char* kSweepSlot = "sweep";

struct RunRequest {
  std::string slot = kLiveSlot;     // results of one slot replace each other in the window
  std::string model_path;           // empty: the default model
  std::string prompt;
  bool chat = false;                // wrap the prompt in the model's chat template
  bool no_think = false;            // with chat: Qwen3's thinking off (kvscope --no-think)
  bool parse_special = true;        // special-token text in the prompt is tokens (false: --no-parse-special)
  std::string policy_spec = "full"; // "snapkv:window=32,kernel=7"
  std::string budget;               // "128" or "20%"; empty: the whole prompt (full cache)
  // How the cache stores keys and values (kernels::parse_cache_types: "q8_0", "kivi2"); empty: float32. A run of
  // another type is named after it too ("snapkv_b25pct_q8_0").
  std::string cache_type;
  // --cache-page N: also count the cache in pages of N tokens per (layer, KV head), the physical bytes a paged
  // serving engine would hold, beside the logical ones (the run's cache_paged_bytes); 0: not counted. The run's
  // tokens and name do not change.
  int cache_page = 0;
  int max_new_tokens = 32;
  // trace::RecordOptions spec. The window records q/k, so a zoomed attention map shows single tokens exactly.
  std::string record = "qk=on";
  std::string name;                 // run name; empty: "<policy spec>_b<budget>"
  std::string device = "cpu";       // compute backend: "cpu" or "cuda" (kvscope --device)
  // After the run, measure its fidelity to the full cache on the same prompt and new tokens (what
  // `kvscope eval fidelity` reports); it arrives as a SessionUpdate with `fidelity` set. Not for `full`.
  bool fidelity = false;
};

// A small fidelity sweep on the worker thread: every (policy, budget) on one prompt against one full-cache
// reference, as `kvscope sweep --eval fidelity` computes each cell.
struct SweepRequest {
  std::string model_path;  // empty: the default model
  std::string prompt;
  bool chat = false;
  bool no_think = false;
  bool parse_special = true;
  std::vector<std::string> policies, budgets;
  int new_tokens = 16;
  std::size_t cells() const { return policies.size() * budgets.size(); }
};

struct SweepRowUpdate {
  uint64_t sweep = 0;     // the id submit_sweep returned
  std::size_t cells = 0;  // of the whole grid
  eval::SweepRow row;
};

struct SessionStatus {
  bool busy = false;            // a run or a load is in progress or queued
  std::string task;             // "loading model", "h2o_b25pct: decode 12/32", ...
  float fraction = 0.0f;        // of the current task
  std::string last_error;       // the latest failure, until the next success
  std::string model_name;       // of the loaded model
  int completed = 0;            // runs finished since start
  double last_run_ms = 0.0;     // wall time of the latest finished run
  bool last_prefill_reused = false;  // the latest run replayed its prompt's captured prefill
};

struct SessionUpdate {
  std::string slot;
  std::shared_ptr<const trace::RunTrace> run;  // never null
  bool final = false;                          // false: a live snapshot of a run still in progress
  std::string source;                          // "live" or the file it came from
  std::shared_ptr<const RunRequest> request;   // what produced a live run (null for files)
  // Set on the update that follows a final one when RunRequest::fidelity asked: `run` is the run it
  // measured (the same pointer), nothing else changes.
  std::shared_ptr<const eval::FidelityResult> fidelity;
};

class Session {
 public:
  // threads: kernel threads for the engine (0: all cores but one when there are four or more, so the
  // window keeps a core to draw with).
  // worker_nice: how far below the calling thread's CPU priority the worker runs (0: the same).
  explicit Session(int threads = 0, int worker_nice = 0);
  // The engine threads a Session made with `threads` uses.
  static int engine_threads(int threads);
  ~Session();  // cancels and joins
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Queues a run. Queued requests for the same slot are dropped, and the running one is cancelled when
  // it is for the same slot. Live-slot requests go to the front; a background run in progress yields to
  // them and is queued again. Returns a request id.
  uint64_t submit(RunRequest request);
  // Queues a measurement of a finished run's fidelity to the full cache (its request's model, policy, budget
  // and new tokens; its own prompt tokens), behind live runs, for a run kept for comparison whose own
  // measurement was superseded. The result arrives as a SessionUpdate with `fidelity` set and `run` == run.
  void measure_fidelity(std::shared_ptr<const trace::RunTrace> run, const RunRequest& request);
  // Queues a sweep (slot kSweepSlot, replacing a queued or running one). Its rows arrive through
  // take_sweep_rows() as cells finish; a live run pauses it and it resumes at the next cell. Throws
  // UsageError for an empty policy or budget list, a bad policy spec or budget.
  uint64_t submit_sweep(SweepRequest request);
  void cancel_sweep();
  std::vector<SweepRowUpdate> take_sweep_rows();
  // Writes runs that are in memory (live ones and ones read from files) into one HDF5 file on a background
  // thread, as `kvscope trace` would have written them; the model does not run. Names must be unique.
  struct SavedRun {
    std::string name;
    std::shared_ptr<const trace::RunTrace> run;
  };
  void save(std::vector<SavedRun> runs, const std::string& path);
  // Reads trace files on a background thread; their runs arrive through poll() as final updates.
  void open_trace(const std::string& path);
  void cancel_all();

  // Everything that happened since the last call, oldest first; at most the newest snapshot per slot.
  std::vector<SessionUpdate> poll();
  // Messages (errors included) since the last call, for the log panel.
  std::vector<std::string> take_messages();
  SessionStatus status() const;
  // No request queued or running and no file being read.
  bool idle() const;
  int threads() const { return threads_; }  // the engine's threads for this window's runs

 private:
  struct Job {
    std::string slot;
    RunRequest request;
    std::shared_ptr<const SweepRequest> sweep;  // set for a sweep job
    std::shared_ptr<const trace::RunTrace> fidelity_of;  // set for a fidelity-only job: the run to measure
    uint64_t id = 0;
    std::size_t next_cell = 0;  // a sweep resumed after a pause starts here
  };
  void worker_main();
  // Runs one request and publishes its result. Returns false when cancelled.
  bool execute(const RunRequest& request);
  // Runs a sweep job's cells from job.next_cell, publishing each row.
  void execute_sweep(const Job& job);
  // The model of `model_path`, loaded on first use (worker thread only).
  const model::Model& ensure_model(const std::string& model_path);
  void publish_fidelity(const RunRequest& request, const std::shared_ptr<const trace::RunTrace>& run,
                        const std::vector<int>& prompt);
  void set_task(const std::string& task, float fraction);
  void push_update(SessionUpdate update);
  void message(const std::string& text, bool error = false);

  int threads_ = 0;
  int worker_nice_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  uint64_t next_id_ = 1;
  bool stopping_ = false;

  // The run in flight: its slot, job, cancel flag and live trace (read by poll() for snapshots).
  std::string running_slot_;
  Job running_job_;
  bool yielded_ = false;  // cancelled to let a live run go first; it was queued again
  std::atomic<bool> cancel_{false};
  trace::LiveTrace* running_live_ = nullptr;
  std::shared_ptr<const trace::RunTrace> last_live_;
  bool running_ = false;
  std::atomic<int> loads_in_flight_{0};

  std::vector<SessionUpdate> updates_;
  std::vector<SweepRowUpdate> sweep_rows_;
  std::vector<std::string> messages_;
  SessionStatus status_;

  // Owned by the worker thread.
  std::shared_ptr<model::Model> model_;
  std::string model_path_;
  // The last full-cache reference of the live runs' fidelity (worker thread only), with what it is of.
  std::shared_ptr<const eval::FidelityReference> fidelity_reference_;
  std::string fidelity_reference_model_;
  int fidelity_reference_tokens_ = 0;
  std::unique_ptr<run::PrefillStore> prefills_;  // prompts whose prefill a budget change can replay

  std::vector<std::thread> loaders_;  // file reads and saves
  std::thread worker_;
};

// The text of a sample prompt shipped in sample_data/prompts (name without extension), the list of
// them, and the prompt used when none is installed.
std::vector<std::string> sample_prompt_names();
std::string sample_prompt(const std::string& name);
// The status line of a prefill in progress: "snapkv_b25pct: prefill 41% (layer 12 of 30, 2897 tokens)"; a block-wise
// prefill names its block ("block at token 512 of 2897").
std::string prefill_task(const std::string& run_name, const engine::LayerProgress& progress);
extern const char* const kFallbackPrompt;

}  // namespace kvscope::viewers
