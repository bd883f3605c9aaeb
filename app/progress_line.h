#pragma once
// One progress line on stderr: redrawn in place on a terminal, a line every 25 %
// otherwise, so logs stay short. Shows done/total, elapsed time and an ETA from the rate so far.
#include <chrono>
#include <string>

namespace kvscope::app {

class ProgressLine {
 public:
  // `already_done` items (resumed cells) count towards done but not towards the rate.
  ProgressLine(std::string label, long total, long already_done = 0);
  void update(long done, const std::string& note = "");
  void finish();  // ends the line on a terminal

  static std::string format_duration(double seconds);  // "42s", "3m05s", "1h02m"

 private:
  std::string label_;
  long total_, start_done_, last_quarter_ = -1;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

}  // namespace kvscope::app
