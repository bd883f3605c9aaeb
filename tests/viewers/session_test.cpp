// The Session on the real default model: a newer request for a slot supersedes the older one (only the
// latest run is published), and a save records several runs into one trace file the reader accepts.
// Skipped when the default model is not installed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/common/error.h"
#include "core/model/model.h"
#include "core/trace/hdf5_reader.h"
#include "kernels/cuda/cuda_device.h"
#include "viewers/session.h"

using namespace kvscope;
using namespace kvscope::viewers;

namespace {

bool have_model() {
  try {
    return std::filesystem::exists(model::default_model_path());
  } catch (...) {
    return false;
  }
}

// Polls until the session is idle, collecting updates and messages.
void drain(Session& s, std::vector<SessionUpdate>& updates, std::vector<std::string>& messages) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(20);
  while (!s.idle() && std::chrono::steady_clock::now() < deadline) {
    for (auto& u : s.poll()) updates.push_back(std::move(u));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(s.idle());
  for (auto& u : s.poll()) updates.push_back(std::move(u));
  for (auto& m : s.take_messages()) messages.push_back(std::move(m));
}

RunRequest request(const std::string& budget) {
  RunRequest r;
  r.prompt = "The keeper hid the key under the seventh step of the lighthouse stairs. Where is the key?";
  r.policy_spec = "streaming_llm";
  r.budget = budget;
  r.max_new_tokens = 3;
  r.record = "similarity=off;decode=off";
  return r;
}

}  // namespace

TEST_CASE("a newer request for a slot supersedes the running one", "[session][model]") {
  if (!have_model()) {
    WARN("default model not installed; skipped");
    return;
  }
  Session session(2);
  session.submit(request("50%"));
  session.submit(request("25%"));
  std::vector<SessionUpdate> updates;
  std::vector<std::string> messages;
  drain(session, updates, messages);
  int finals = 0;
  for (const auto& u : updates) {
    CHECK(u.slot == "live");
    CHECK(u.run != nullptr);
    if (!u.final) continue;
    ++finals;
    CHECK(u.run->name == "streaming_llm_b25pct");
    CHECK(u.run->complete);
    CHECK(u.run->n_generated() >= 1);  // the model may end its answer before the limit
    CHECK(u.run->n_generated() <= 3);
    REQUIRE(u.request != nullptr);
    CHECK(u.request->budget == "25%");
  }
  CHECK(finals == 1);
  CHECK(session.status().last_error.empty());
}

TEST_CASE("the live run goes ahead of a background run, which still completes", "[session][model]") {
  if (!have_model()) {
    WARN("default model not installed; skipped");
    return;
  }
  Session session(2);
  RunRequest baseline = request("");
  baseline.slot = "baseline";
  baseline.policy_spec = "full";
  baseline.max_new_tokens = 8;
  session.submit(baseline);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // usually lets the baseline start
  session.submit(request("30%"));
  std::vector<SessionUpdate> updates;
  std::vector<std::string> messages;
  drain(session, updates, messages);
  std::vector<std::string> finished;
  for (const auto& u : updates)
    if (u.final) finished.push_back(u.slot);
  CHECK(finished == std::vector<std::string>{"live", "baseline"});
}

TEST_CASE("saving writes the runs on screen from memory into one trace file", "[session][model]") {
  if (!have_model()) {
    WARN("default model not installed; skipped");
    return;
  }
  const auto path = std::filesystem::temp_directory_path() / "kvscope_session_save_test.h5";
  Session session(2);
  RunRequest full = request("");
  full.policy_spec = "full";
  full.slot = "baseline";
  session.submit(full);
  session.submit(request("40%"));
  std::vector<SessionUpdate> updates;
  std::vector<std::string> messages;
  drain(session, updates, messages);
  std::vector<Session::SavedRun> runs;
  for (const auto& u : updates)
    if (u.final) runs.push_back({u.run->name, u.run});
  REQUIRE(runs.size() == 2);
  const int completed = session.status().completed;
  session.save(runs, path.string());
  updates.clear();
  drain(session, updates, messages);
  CHECK(updates.empty());                          // saving publishes nothing new
  CHECK(session.status().completed == completed);  // and runs nothing
  const trace::TraceView view = trace::read_trace(path);
  REQUIRE(view.runs.size() == 2);
  for (const auto& saved : runs) {
    const trace::RunTrace* got = view.find(saved.name);
    REQUIRE(got != nullptr);
    CHECK(got->complete);
    CHECK(got->generated_ids == saved.run->generated_ids);
    CHECK(got->events.size() == saved.run->events.size());
    CHECK(got->meta("policy") == saved.run->meta("policy"));
    CHECK(got->meta("stop_reason") == saved.run->meta("stop_reason"));
    REQUIRE(got->kept_mask.size() == saved.run->kept_mask.size());
    for (std::size_t l = 0; l < got->kept_mask.size(); ++l) CHECK(got->kept_mask[l] == saved.run->kept_mask[l]);
  }
  std::filesystem::remove(path);

  // Nothing to save is a usage error, not a silent empty file.
  CHECK_THROWS_AS(session.save({}, path.string()), UsageError);
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("the window's device choice reaches the run: cuda without a device is a logged error, cpu still runs",
          "[session][model]") {
  if (!have_model()) {
    WARN("default model not installed; skipped");
    return;
  }
  const auto cuda = kernels::cuda::list_cuda_devices();
  if (!cuda.devices.empty()) {
    WARN("a CUDA device is present; the no-device path is not exercised here");
    return;
  }
  Session session(1);
  RunRequest on_cuda = request("50%");
  on_cuda.device = "cuda";
  session.submit(on_cuda);
  std::vector<SessionUpdate> updates;
  std::vector<std::string> messages;
  drain(session, updates, messages);
  CHECK(session.status().last_error.find("no CUDA device") != std::string::npos);
  for (const auto& u : updates) CHECK_FALSE(u.final);

  session.submit(request("50%"));  // the default device, cpu
  updates.clear();
  drain(session, updates, messages);
  CHECK(session.status().last_error.empty());
  CHECK(std::any_of(updates.begin(), updates.end(), [](const SessionUpdate& u) { return u.final && u.run->complete; }));
}
