#include "core/common/runaway_guard.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "core/common/atomic_file.h"

namespace kvscope {

uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

RunawayGuard::RunawayGuard(std::string what, std::chrono::milliseconds time_limit, uint64_t growth_bytes)
    : what_(std::move(what)), time_limit_(time_limit), growth_bytes_(growth_bytes) {
  thread_ = std::thread([this, start = resident_bytes()] { watch(start); });
}

RunawayGuard::~RunawayGuard() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  done_signal_.notify_all();
  thread_.join();
}

void RunawayGuard::watch(uint64_t start_rss) {
  // 270 MB/s of growth (a tokenizer load gone wrong) passes the limit by at most ~14 MB between samples.
  constexpr auto kPeriod = std::chrono::milliseconds(50);
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!done_signal_.wait_for(lock, kPeriod, [this] { return done_; })) {
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    const uint64_t rss = resident_bytes();
    const uint64_t grown = rss > start_rss ? rss - start_rss : 0;
    std::string why;
    if (elapsed > time_limit_) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.1f", static_cast<double>(time_limit_.count()) / 1000.0);
      why = std::string("still running after the bound of ") + seconds + " s";
    } else if (grown > growth_bytes_) {
      why = "memory grew by " + std::to_string(grown >> 20) + " MiB in " + std::to_string(elapsed.count()) +
            " ms (the bound is " + std::to_string(growth_bytes_ >> 20) + " MiB)";
    }
    if (why.empty()) continue;
    const std::string message = "kvscope: error: " + what_ + ": " + why + "; stopped\n";
    // Nothing of the process can be trusted to unwind while the step runs: write and leave.
    [[maybe_unused]] const auto written = ::write(STDERR_FILENO, message.data(), message.size());
    abandon_unfinished_files();  // no output half-written by this process stays beside its target
    _exit(1);
  }
}

}  // namespace kvscope
