#include "viewers/background_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvscope::viewers {

std::string lower_this_thread_priority(int increment) {
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, tid);
  if (errno != 0) return std::string("worker priority unchanged: ") + std::strerror(errno);
  const int wanted = now + increment > 19 ? 19 : now + increment;
  if (setpriority(PRIO_PROCESS, tid, wanted) != 0)
    return std::string("worker priority unchanged: ") + std::strerror(errno);
  return "worker runs at nice " + std::to_string(wanted) + ", below the window's " + std::to_string(now);
}

}  // namespace kvscope::viewers
