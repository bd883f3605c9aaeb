#include "viewers/rasteriser_threads.h"

#include <cstdlib>
#include <thread>

namespace kvscope::viewers {

std::string share_cpu_with_rasteriser(int engine_threads) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores <= 0 || engine_threads < cores || std::getenv("LP_NUM_THREADS")) return "";
  const std::string threads = std::to_string(2 * cores);
  setenv("LP_NUM_THREADS", threads.c_str(), 0);
  return "software OpenGL, if used, draws with " + threads + " threads (LP_NUM_THREADS): the engine takes every core";
}

}  // namespace kvscope::viewers
