#include "viewers/session.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/model/chat_template.h"
#include "core/model/model.h"
#include "core/policy/budget_spec.h"
#include "core/policy/registry.h"
#include "core/trace/hdf5_reader.h"
#include "core/trace/hdf5_writer.h"
#include "core/trace/recorder.h"
#include "core/trace/run_metadata.h"
#include "core/trace/trace_probe.h"

namespace kvscope::viewers {

const char* const kFallbackPrompt =
    "The lighthouse keeper climbed the spiral stairs every evening at dusk. He trimmed the wick, polished the "
    "great lens and wrote the weather in his log: wind from the west, a long swell, three ships passing north. "
    "One night the lamp would not light. He searched the store room for oil and found only an old letter "
    "addressed to the keeper before him. It said that the key to the lamp room was hidden under the seventh "
    "step. Question: where was the key to the lamp room hidden? Answer:";

namespace {

std::filesystem::path prompts_dir() {
  if (const char* env = std::getenv("KVSCOPE_SOURCE_DIR")) return std::filesystem::path(env) / "sample_data" / "prompts";
  return std::filesystem::path(KVSCOPE_SOURCE_DIR) / "sample_data" / "prompts";
}

}  // namespace

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

Session::Session(int threads) : threads_(threads) {
  if (threads_ <= 0) {
    const int hw = static_cast<int>(std::thread::hardware_concurrency());
    threads_ = hw >= 4 ? hw - 1 : std::max(1, hw);
  }
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
  job.runs.push_back(std::move(request));
  if (running_ && running_slot_ == job.slot) cancel_ = true;
  if (job.slot == kLiveSlot) {
    // The run the user is steering goes first: a background run in progress (the baseline) yields and
    // is queued again right behind it, so a budget change shows without waiting for the baseline.
    if (running_ && running_slot_ != kLiveSlot && running_job_.save_path.empty()) {
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

void Session::save(std::vector<RunRequest> requests, const std::string& path) {
  if (requests.empty()) throw UsageError("nothing to save: no live runs (runs read from files are files already)");
  std::lock_guard<std::mutex> lock(mutex_);
  Job job;
  job.slot = "save:" + path;
  job.runs = std::move(requests);
  job.save_path = path;
  queue_.push_back(std::move(job));
  wake_.notify_all();
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
  if (running_recorder_) {
    auto snap = running_recorder_->snapshot();
    if (snap && snap != last_live_) {
      last_live_ = snap;
      // A newer snapshot of the same run supersedes an unread older one.
      std::erase_if(updates_, [&](const SessionUpdate& u) { return !u.final && u.slot == running_slot_; });
      updates_.push_back({running_slot_, snap, false, "live", nullptr});
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
      if (job.save_path.empty()) {
        execute(job.runs.front(), nullptr, true);
      } else {
        trace::WriterOptions wopts;
        wopts.force = true;
        trace::Hdf5Writer writer(job.save_path, wopts);
        int saved = 0;
        for (const auto& r : job.runs) {
          if (!execute(r, &writer, false)) break;
          ++saved;
        }
        writer.close();
        message(saved == static_cast<int>(job.runs.size())
                    ? "saved " + std::to_string(saved) + " run(s) to " + job.save_path
                    : "error: saving to " + job.save_path + " was cancelled after " + std::to_string(saved) + " run(s)",
                saved != static_cast<int>(job.runs.size()));
      }
    } catch (const std::exception& e) {
      message(job.slot + ": " + e.what(), true);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    running_recorder_ = nullptr;
    last_live_.reset();
  }
}

bool Session::execute(const RunRequest& request, trace::Hdf5Writer* writer, bool publish) {
  auto set_task = [this](const std::string& task, float fraction) {
    std::lock_guard<std::mutex> lock(mutex_);
    status_.task = task;
    status_.fraction = fraction;
  };
  const auto started = std::chrono::steady_clock::now();
  const std::filesystem::path path = model::resolve_model_path(request.model_path);
  if (!model_ || path.string() != model_path_) {
    set_task("loading model " + path.filename().string(), 0.0f);
    auto loaded = std::make_shared<model::Model>(model::load_model(path));
    std::lock_guard<std::mutex> lock(mutex_);
    model_ = std::move(loaded);
    model_path_ = path.string();
    status_.model_name = model_->config.name.empty() ? path.filename().string() : model_->config.name;
  }
  const model::Model& model = *model_;

  if (request.prompt.empty()) throw UsageError("the prompt is empty");
  const std::string text = request.chat ? model::apply_chatml({{"user", request.prompt}}) : request.prompt;
  std::vector<int> tokens;
  if (model.tokenizer->add_bos() && model.tokenizer->bos_id() >= 0) tokens.push_back(model.tokenizer->bos_id());
  const auto body = model.tokenizer->encode(text, request.chat);
  tokens.insert(tokens.end(), body.begin(), body.end());

  auto policy = policy::make_policy(request.policy_spec);
  const bool uses_budget = policy.name != "full" && !request.budget.empty();
  if (policy.name != "full" && request.budget.empty())
    throw UsageError("policy '" + policy.name + "' needs a budget (tokens per layer and KV head, or a percentage)");
  engine::GenerateOptions options;
  options.max_new_tokens = request.max_new_tokens;
  if (uses_budget) options.budget = policy::BudgetSpec::parse(request.budget);

  trace::RecordOptions record = trace::RecordOptions::parse(request.record);
  record.live_view = true;
  trace::RecordedRun run;
  run.name = !request.name.empty() ? request.name
                                   : trace::run_name(policy.name == "full" ? std::string("full") : request.policy_spec,
                                                     uses_budget ? request.budget : "");
  run.config = model.config;
  run.tokenizer = model.tokenizer.get();
  run.prompt = tokens;
  run.max_new_tokens = options.max_new_tokens;
  run.policy = policy.policy.get();
  trace::RunDescription description;
  description.policy_name = policy.name;
  description.policy_spec = request.policy_spec;
  description.policy_params = policy.params.as_text();
  description.budget = uses_budget ? request.budget : "";
  description.prompt = text;
  description.chat = request.chat;
  description.prompt_tokens = static_cast<int>(tokens.size());
  description.options = options;
  description.source = "kvscope gui";
  run.metadata = trace::run_metadata(model, description);

  const std::string name = run.name;
  trace::Recorder recorder(record, writer, std::move(run));
  if (publish) {
    std::lock_guard<std::mutex> lock(mutex_);
    running_recorder_ = &recorder;
  }
  // The recorder must not be read after it dies: unpublish it on every way out of this scope.
  struct Unpublish {
    Session* s;
    ~Unpublish() {
      std::lock_guard<std::mutex> lock(s->mutex_);
      s->running_recorder_ = nullptr;
    }
  } unpublish{this};

  const int total = static_cast<int>(tokens.size()) + options.max_new_tokens;
  engine::RunHooks hooks;
  hooks.policy = policy.policy.get();
  hooks.observers.push_back(&recorder);
  hooks.cancel = &cancel_;
  hooks.progress = [&](const engine::Progress& p) {
    const bool prefill = p.phase == engine::Phase::Prefill;
    const int done = prefill ? p.done : static_cast<int>(tokens.size()) + p.done;
    set_task(name + (prefill ? ": prefill " : ": decode ") + std::to_string(p.done) + "/" + std::to_string(p.total),
             total > 0 ? static_cast<float>(done) / total : 0.0f);
  };
  set_task(name + ": starting", 0.0f);
  engine::Engine engine(model);
  const engine::RunResult result = engine.generate(tokens, options, hooks);
  if (result.cancelled || cancel_) {
    message(name + (yielded_ ? ": paused for the live run, queued again" : ": cancelled (superseded)"));
    return false;  // a cancelled run is never published as a result
  }
  recorder.finish(result);
  auto final_run = recorder.snapshot();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_recorder_ = nullptr;  // in the same lock as the final update, so no live snapshot follows it
    std::erase_if(updates_, [&](const SessionUpdate& u) { return !u.final && u.slot == request.slot; });
    if (final_run && publish)
      updates_.push_back({request.slot, final_run, true, "live", std::make_shared<const RunRequest>(request)});
    status_.completed++;
    status_.last_run_ms = ms;
    status_.last_error.clear();
    messages_.push_back(name + ": done in " + std::to_string(static_cast<int>(ms)) + " ms (" +
                        std::to_string(result.generated_tokens.size()) + " tokens, " + result.stop_reason + ")" +
                        (writer ? ", recorded to " + writer->path().string() : ""));
  }
  return true;
}

}  // namespace kvscope::viewers
