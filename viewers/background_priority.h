#pragma once
// The window's worker computes at a lower CPU priority than the window: on a machine with few cores the
// model's threads otherwise take the cores the window needs to draw (software OpenGL draws on the CPU too),
// and the window stutters exactly while a run is in progress. The threads the worker's OpenMP team starts
// inherit the priority.
#include <string>

namespace kvscope::viewers {

// Raises the calling thread's nice value by `increment` (Linux: a per-thread attribute). Returns a line for
// the log: what was done, or why it could not be (then the thread keeps its priority).
std::string lower_this_thread_priority(int increment);

}  // namespace kvscope::viewers
