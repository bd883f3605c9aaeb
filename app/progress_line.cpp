#include "app/progress_line.h"

#include <unistd.h>

#include <cstdio>

namespace kvscope::app {

ProgressLine::ProgressLine(std::string label, long total, long already_done)
    : label_(std::move(label)),
      total_(total),
      start_done_(already_done),
      tty_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

std::string ProgressLine::format_duration(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%lds", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  return buf;
}

void ProgressLine::update(long done, const std::string& note) {
  const auto now = std::chrono::steady_clock::now();
  const long quarter = total_ > 0 ? done * 4 / total_ : 4;  // quarters, off a terminal
  if (tty_ ? (done < total_ && now - last_draw_ < std::chrono::milliseconds(200)) : quarter == last_quarter_) return;
  last_draw_ = now;
  last_quarter_ = quarter;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const long fresh = done - start_done_;
  std::string eta = "?";
  if (fresh > 0) eta = format_duration(elapsed / fresh * (total_ - done));
  const int width = 24;
  const int filled = total_ > 0 ? static_cast<int>(width * done / total_) : width;
  std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
  std::fprintf(stderr, "%s%s %s %ld/%ld  elapsed %s  ETA %s%s%s", tty_ ? "\r\033[K" : "", label_.c_str(), bar.c_str(),
               done, total_, format_duration(elapsed).c_str(), done >= total_ ? "0s" : eta.c_str(),
               note.empty() ? "" : "  ", note.c_str());
  if (!tty_) std::fprintf(stderr, "\n");
  drawn_ = true;
}

void ProgressLine::finish() {
  if (tty_ && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace kvscope::app
