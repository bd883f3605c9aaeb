#include "viewers/session.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/run/execute.h"
#include "core/trace/emit_run.h"
#include "core/trace/hdf5_reader.h"
#include "core/trace/hdf5_writer.h"
#include "core/trace/live_trace.h"
#include "core/trace/recorder.h"
#include "core/trace/trace_probe.h"
#include "kernels/kv_storage.h"
#include "viewers/background_priority.h"

namespace kvscope::viewers {

const char* const kFallbackPrompt =
    "The lighthouse keeper climbed the spiral stairs every evening at dusk. He trimmed the wick, polished the "
    "great lens and wrote the weather in his log: wind from the west, a long swell, three ships passing north. "
    "One night the lamp would not light. He searched the store room for oil and found only an old letter "
    "addressed to the keeper before him. It said that the key to the lamp room was hidden under the seventh "
    "step. Question: where was the key to the lamp room hidden? Answer:";

namespace {

// ", N % of prefill layers from a block capture" when a block-wise run took some (engine/block_prefix.h).
std::string blocks_reused(const engine::RunResult& result) {
  if (result.prefill_share_from_blocks <= 0.0) return "";
  return ", " + std::to_string(result.prefill_percent_from_blocks()) + " % of prefill layers from a block capture";
}

std::filesystem::path prompts_dir() {
  if (const char* env = std::getenv("KVSCOPE_SOURCE_DIR")) return std::filesystem::path(env) / "sample_data" / "prompts";
  return std::filesystem::path(KVSCOPE_SOURCE_DIR) / "sample_data" / "prompts";
}

// The window's chat: the prompt as the one user message, with Qwen3's thinking switch.
run::ChatSpec window_chat(bool chat, bool no_think, bool parse_special) {
  run::ChatSpec spec;
  spec.enabled = chat;
  spec.settings.enable_thinking = !no_think;
  spec.parse_special = parse_special;
  return spec;
}

}  // namespace

std::string prefill_task(const std::string& run_name, const engine::LayerProgress& p) {
  const std::string where = p.block_tokens < p.prompt_tokens
                                ? "block at token " + std::to_string(p.block_first) + " of " + std::to_string(p.prompt_tokens)
                                : std::to_string(p.prompt_tokens) + " tokens";
  return run_name + ": prefill " + std::to_string(static_cast<int>(std::floor(100.0 * p.fraction()))) + "% (layer " +
         std::to_string(p.layers_done + 1) + " of " + std::to_string(p.n_layers) + ", " + where + ")";
}

std::vector<std::string> sample_prompt_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(prompts_dir(), ec)) {
    if (!entry.is_regular_file()) continue;
    const auto ext = entry.path().extension().string();
    if (ext == ".txt" || ext == ".md" || ext.empty()) names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string sample_prompt(const std::string& name) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(prompts_dir(), ec)) {
    if (!entry.is_regular_file() || entry.path().stem().string() != name) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  return kFallbackPrompt;
}

int Session::engine_threads(int asked) {
  if (asked > 0) return asked;
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return hw >= 4 ? hw - 1 : std::max(1, hw);
}

Session::Session(int threads, int worker_nice)
    : threads_(engine_threads(threads)), worker_nice_(worker_nice), prefills_(std::make_unique<run::PrefillStore>(2)) {
  worker_ = std::thread([this] { worker_main(); });
}

Session::~Session() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  cancel_ = true;
  wake_.notify_all();
  worker_.join();
  for (auto& t : loaders_) t.join();
}

uint64_t Session::submit(RunRequest request) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = next_id_++;
  std::erase_if(queue_, [&](const Job& q) { return q.slot == request.slot; });
  Job job;
  job.slot = request.slot;
  job.request = std::move(request);
  job.id = id;
  if (running_ && running_slot_ == job.slot) cancel_ = true;
  if (job.slot == kLiveSlot) {
    // The run the user is steering goes first: a background run in progress (the baseline) yields and
    // is queued again right behind it, so a budget change shows without waiting for the baseline.
    if (running_ && running_slot_ != kLiveSlot) {
      cancel_ = true;
      yielded_ = true;
      queue_.push_front(running_job_);
    }
    queue_.push_front(std::move(job));
  } else {
    queue_.push_back(std::move(job));
  }
  wake_.notify_all();
  return id;
}

void Session::measure_fidelity(std::shared_ptr<const trace::RunTrace> run, const RunRequest& request) {
  if (!run) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Job job;
  job.slot = "fidelity " + run->name;  // its own slot: a new live run does not drop it, only delays it
  job.request = request;
  job.fidelity_of = std::move(run);
  job.id = next_id_++;
  queue_.push_back(std::move(job));
  wake_.notify_all();
}

uint64_t Session::submit_sweep(SweepRequest request) {
  if (request.policies.empty() || request.budgets.empty())
    throw UsageError("a sweep needs at least one policy and one budget");
  if (request.new_tokens < 1) throw UsageError("a sweep needs at least 1 new token");
  for (const auto& p : request.policies)
    for (const auto& b : request.budgets) {
      run::RunSpec spec;
      spec.policy = p;
      spec.budget = b;
      spec.prompt = request.prompt;
      run::check(spec);  // a typo fails here, not cells later on the worker
    }
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = next_id_++;
  std::erase_if(queue_, [&](const Job& q) { return q.slot == kSweepSlot; });
  if (running_ && running_slot_ == kSweepSlot) cancel_ = true;
  Job job;
  job.slot = kSweepSlot;
  job.sweep = std::make_shared<const SweepRequest>(std::move(request));
  job.id = id;
  queue_.push_back(std::move(job));
  wake_.notify_all();
  return id;
}

void Session::cancel_sweep() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(queue_, [&](const Job& q) { return q.slot == kSweepSlot; });
  if (running_ && running_slot_ == kSweepSlot) cancel_ = true;
}

std::vector<SweepRowUpdate> Session::take_sweep_rows() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<SweepRowUpdate> out;
  out.swap(sweep_rows_);
  return out;
}

void Session::save(std::vector<SavedRun> runs, const std::string& path) {
  if (runs.empty()) throw UsageError("nothing to save: no finished runs");
  ++loads_in_flight_;
  std::lock_guard<std::mutex> lock(mutex_);
  loaders_.emplace_back([this, runs = std::move(runs), path] {
    try {
      trace::WriterOptions options;
      options.force = true;
      trace::Hdf5Writer writer(path, options);
      for (const auto& r : runs) trace::emit_run(*r.run, writer, r.name);
      writer.close();
      message("saved " + std::to_string(runs.size()) + " run(s) to " + path);
    } catch (const std::exception& e) {
      message("saving to " + path + ": " + e.what(), true);
    }
    --loads_in_flight_;
  });
}

void Session::open_trace(const std::string& path) {
  ++loads_in_flight_;
  std::lock_guard<std::mutex> lock(mutex_);
  loaders_.emplace_back([this, path] {
    try {
      // A damaged file must not take the window (and its unsaved live runs) down: check it in a child first.
      trace::probe_trace(path);
      trace::TraceView view = trace::read_trace(path);
      for (const auto& w : view.warnings) message(path + ": " + w);
      for (const auto& run : view.runs) {
        SessionUpdate u;
        u.slot = path + "#" + run->name;
        u.run = run;
        u.final = true;
        u.source = path;
        push_update(std::move(u));
      }
      message("opened " + path + " (" + std::to_string(view.runs.size()) + " runs)");
    } catch (const std::exception& e) {
      message(e.what(), true);
    }
    --loads_in_flight_;
  });
}

void Session::cancel_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.clear();
  if (running_) cancel_ = true;
}

std::vector<SessionUpdate> Session::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (running_live_) {
    auto snap = running_live_->snapshot();
    if (snap && snap != last_live_) {
      last_live_ = snap;
      // A newer snapshot of the same run supersedes an unread older one.
      std::erase_if(updates_, [&](const SessionUpdate& u) { return !u.final && u.slot == running_slot_; });
      updates_.push_back({running_slot_, snap, false, "live", nullptr, nullptr});
    }
  }
  std::vector<SessionUpdate> out;
  out.swap(updates_);
  return out;
}

std::vector<std::string> Session::take_messages() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  out.swap(messages_);
  return out;
}

SessionStatus Session::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  SessionStatus s = status_;
  s.busy = running_ || !queue_.empty() || loads_in_flight_ > 0;
  if (!s.busy) s.task.clear();
  return s;
}

bool Session::idle() const { return !status().busy; }

void Session::push_update(SessionUpdate update) {
  std::lock_guard<std::mutex> lock(mutex_);
  updates_.push_back(std::move(update));
}

void Session::message(const std::string& text, bool error) {
  std::lock_guard<std::mutex> lock(mutex_);
  messages_.push_back(error ? "error: " + text : text);
  if (error) status_.last_error = text;
}

void Session::worker_main() {
  // Before the first parallel region, so the OpenMP threads this thread starts inherit the priority.
  if (worker_nice_ > 0) message(lower_this_thread_priority(worker_nice_));
  engine::set_threads(threads_);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      running_slot_ = job.slot;
      running_job_ = job;
      cancel_ = false;
      yielded_ = false;
    }
    try {
      if (job.sweep) {
        execute_sweep(job);
      } else if (job.fidelity_of) {
        ensure_model(job.request.model_path);
        const auto& ids = job.fidelity_of->prompt_ids;
        publish_fidelity(job.request, job.fidelity_of, std::vector<int>(ids.begin(), ids.end()));
      } else
        execute(job.request);
    } catch (const std::exception& e) {
      message(job.slot + ": " + e.what(), true);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    running_live_ = nullptr;
    last_live_.reset();
  }
}

void Session::set_task(const std::string& task, float fraction) {
  std::lock_guard<std::mutex> lock(mutex_);
  status_.task = task;
  status_.fraction = fraction;
}

const model::Model& Session::ensure_model(const std::string& model_path) {
  const std::filesystem::path path = model::resolve_model_path(model_path);
  if (!model_ || path.string() != model_path_) {
    set_task("loading model " + path.filename().string(), 0.0f);
    auto loaded = std::make_shared<model::Model>(model::load_model(path));
    std::lock_guard<std::mutex> lock(mutex_);
    model_ = std::move(loaded);
    model_path_ = path.string();
    status_.model_name = model_->config.name.empty() ? path.filename().string() : model_->config.name;
  }
  return *model_;
}

bool Session::execute(const RunRequest& request) {
  const auto started = std::chrono::steady_clock::now();
  run::RunSpec spec;
  spec.policy = request.policy_spec;
  spec.budget = request.budget;
  spec.prompt = request.prompt;
  spec.chat = window_chat(request.chat, request.no_think, request.parse_special);
  spec.generation.max_new_tokens = request.max_new_tokens;
  spec.generation.cache_page_tokens = request.cache_page;
  spec.record = request.record;
  spec.name = request.name;
  spec.source = "kvscope gui";
  spec.device = kernels::parse_device(request.device);
  if (!request.cache_type.empty()) {
    spec.generation.cache_type = kernels::parse_cache_types(request.cache_type);
    if (spec.name.empty() && spec.generation.cache_type != kernels::KVCacheTypes{})
      spec.name = run::check(spec).run_name + "_" + trace::run_name(kernels::cache_type_name(spec.generation.cache_type), "");
  }
  const run::CheckedSpec checked = run::check(spec);  // a bad request fails before any model loads
  const std::string& name = checked.run_name;
  if (const std::string note = kernels::unverified_device_note(spec.device, spec.generation.cache_type); !note.empty())
    message(name + ": warning: " + note);
  const model::Model& model = ensure_model(request.model_path);

  trace::LiveTrace live;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_live_ = &live;
  }
  // The live trace must not be read after it dies: unpublish it on every way out of this scope.
  struct Unpublish {
    Session* s;
    ~Unpublish() {
      std::lock_guard<std::mutex> lock(s->mutex_);
      s->running_live_ = nullptr;
    }
  } unpublish{this};

  run::RunSinks sinks;
  sinks.traces.push_back(&live);
  sinks.cancel = &cancel_;
  sinks.prefills = prefills_.get();
  sinks.progress = [&](const engine::Progress& p) {
    const bool prefill = p.phase == observation::Phase::Prefill;
    const int total = request.max_new_tokens + 1;
    set_task(name + (prefill ? ": prefill " : ": decode ") + std::to_string(p.done) + "/" + std::to_string(p.total),
             prefill ? static_cast<float>(p.done) / std::max(1, p.total) : static_cast<float>(p.done) / total);
  };
  // A one-pass prefill of a long prompt reports no token until it ends (up to a minute on a busy machine): its layers
  // say how far it is.
  sinks.prefill_layer_progress = [&](const engine::LayerProgress& p) { set_task(prefill_task(name, p), p.fraction()); };
  set_task(name + ": starting", 0.0f);
  const run::RunOutcome outcome = run::execute(spec, model, sinks);
  const engine::RunResult& result = outcome.result;
  if (result.cancelled || cancel_) {
    message(name + (yielded_ ? ": paused for the live run, queued again" : ": cancelled (superseded)"));
    return false;  // a cancelled run is never published as a result
  }
  auto final_run = live.snapshot();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_live_ = nullptr;  // in the same lock as the final update, so no live snapshot follows it
    std::erase_if(updates_, [&](const SessionUpdate& u) { return !u.final && u.slot == request.slot; });
    if (final_run)
      updates_.push_back({request.slot, final_run, true, "live", std::make_shared<const RunRequest>(request), nullptr});
    status_.completed++;
    status_.last_run_ms = ms;
    status_.last_prefill_reused = outcome.prefill_reused;
    status_.last_error.clear();
    messages_.push_back(name + ": done in " + std::to_string(static_cast<int>(ms)) + " ms (" +
                        std::to_string(result.generated_tokens.size()) + " tokens, " + result.stop_reason +
                        (outcome.prefill_reused ? ", prefill reused" : "") + blocks_reused(result) + ")");
    // What the policy departed from (also in the run's policy_warnings attribute), where the user looks.
    for (const auto& w : outcome.policy_warnings) messages_.push_back(name + ": warning: " + w);
  }
  if (request.fidelity && checked.policy_name != "full" && final_run)
    publish_fidelity(request, final_run, outcome.prompt_tokens);
  return true;
}

void Session::publish_fidelity(const RunRequest& request, const std::shared_ptr<const trace::RunTrace>& run,
                               const std::vector<int>& prompt) {
  const std::string name = run->name;
  // The full-cache reference and the teacher-forced policy run both replay the prompt's prefill that the
  // run just captured (when its policy prefills in one pass): two decodes, no prefill.
  eval::Evaluator evaluator(*model_, prefills_.get());
  evaluator.cancel = &cancel_;
  evaluator.progress = [&](const engine::Progress& p) {
    if (p.phase == observation::Phase::Decode)
      set_task(name + ": fidelity to the full cache", static_cast<float>(p.done) / std::max(1, p.total));
  };
  try {
    // The full cache's continuation does not depend on the policy or budget: computed once per model,
    // prompt and length, so a budget change costs one teacher-forced decode, not two.
    if (!fidelity_reference_ || fidelity_reference_model_ != model_path_ || fidelity_reference_->prompt != prompt ||
        fidelity_reference_tokens_ != request.max_new_tokens) {
      fidelity_reference_.reset();
      // The window's runs (the baseline among them) stop at the model's end of generation; the reference
      // stops there too, so fidelity compares exactly the tokens the baseline shows.
      fidelity_reference_ = std::make_shared<const eval::FidelityReference>(
          evaluator.fidelity_reference(prompt, request.max_new_tokens, eval::ReferenceEnd::AtEndOfGeneration));
      fidelity_reference_model_ = model_path_;
      fidelity_reference_tokens_ = request.max_new_tokens;
    }
    auto result = std::make_shared<const eval::FidelityResult>(
        evaluator.fidelity(*fidelity_reference_,
                           {request.policy_spec, request.budget,
                            request.cache_type.empty() ? kernels::KVCacheTypes{} : kernels::parse_cache_types(request.cache_type),
                            request.cache_page}));
    char line[160];
    std::snprintf(line, sizeof line,
                  ": fidelity to the full cache: top-1 agreement %.3f, KL mean %.4f, %d of %d tokens "
                  "equal, peak cache saved %.1f%%",
                  result->score.top1_agreement, result->score.kl_mean, result->score.agreeing_prefix,
                  result->score.steps, 100.0 * result->memory.saved());
    message(name + line);
    SessionUpdate u;
    u.slot = request.slot;
    u.run = run;
    u.final = true;
    u.source = "live";
    u.fidelity = std::move(result);
    push_update(std::move(u));
  } catch (const eval::EvalCancelled&) {
    message(name + ": fidelity not measured (superseded)");
  }
}

void Session::execute_sweep(const Job& job) {
  const SweepRequest& request = *job.sweep;
  const model::Model& model = ensure_model(request.model_path);
  eval::Evaluator evaluator(model, prefills_.get());
  evaluator.cancel = &cancel_;
  const std::size_t cells = request.cells();
  std::size_t cell = job.next_cell;
  evaluator.progress = [&](const engine::Progress& p) {
    const float within = p.phase == observation::Phase::Decode ? static_cast<float>(p.done) / std::max(1, p.total) : 0;
    set_task("sweep: cell " + std::to_string(cell + 1) + "/" + std::to_string(cells),
             (static_cast<float>(cell) + within) / cells);
  };
  try {
    set_task("sweep: full-cache reference", static_cast<float>(cell) / cells);
    // As the Summary's fidelity: the reference ends where the full cache ends its answer, so a cell's numbers
    // are those the Summary shows for that (policy, budget) and `kvscope eval fidelity --stop-at-end` prints.
    const auto reference = evaluator.fidelity_reference(
        run::encode_prompt(model, request.prompt, window_chat(request.chat, request.no_think, request.parse_special)),
        request.new_tokens, eval::ReferenceEnd::AtEndOfGeneration);
    for (; cell < cells; ++cell) {
      // Cells in the order of a sweep grid: policies, then budgets.
      const eval::CellPolicy policy{request.policies[cell / request.budgets.size()],
                                    request.budgets[cell % request.budgets.size()]};
      SweepRowUpdate u;
      u.sweep = job.id;
      u.cells = cells;
      u.row.cell = cell;
      u.row.prompt = "window";
      u.row.policy = policy.policy;
      u.row.budget = policy.budget;
      u.row.metrics = evaluator.fidelity(reference, policy).metrics();
      std::lock_guard<std::mutex> lock(mutex_);
      sweep_rows_.push_back(std::move(u));
      running_job_.next_cell = cell + 1;  // where a pause for a live run resumes
    }
    message("sweep: " + std::to_string(cells) + " cells done");
  } catch (const eval::EvalCancelled&) {
    std::lock_guard<std::mutex> lock(mutex_);
    messages_.push_back(yielded_ ? "sweep: paused for the live run after " + std::to_string(cell) + " cells"
                                 : "sweep: cancelled after " + std::to_string(cell) + " of " + std::to_string(cells) +
                                       " cells");
  }
}

}  // namespace kvscope::viewers
