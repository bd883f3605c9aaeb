#pragma once
// A watchdog around one step that a library runs and kvscope cannot interrupt (transformers loading a
// tokenizer): while it lives, a thread samples the elapsed time and the process's resident memory, and when
// the step runs past `seconds` or the memory grows by more than `growth_bytes` since the guard began, it
// writes "kvscope: error: <what>: ..." to stderr and ends the process with exit status 1. A runaway inside
// Rust or C code cannot be unwound into an exception, and waiting for the OOM killer takes the machine with it;
// ending the process at once is the only clean outcome. The limits are far above the step's normal use, and only
// the growth during the step counts, so the rest of the process's memory never trips it.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace kvscope {

class RunawayGuard {
 public:
  RunawayGuard(std::string what, std::chrono::milliseconds time_limit, uint64_t growth_bytes);
  ~RunawayGuard();
  RunawayGuard(const RunawayGuard&) = delete;
  RunawayGuard& operator=(const RunawayGuard&) = delete;

 private:
  void watch(uint64_t start_rss);

  std::string what_;
  std::chrono::milliseconds time_limit_;
  uint64_t growth_bytes_;
  std::mutex mutex_;
  std::condition_variable done_signal_;
  bool done_ = false;
  std::thread thread_;
};

// The process's resident set in bytes (/proc/self/statm), 0 where it cannot be read.
uint64_t resident_bytes();

}  // namespace kvscope
