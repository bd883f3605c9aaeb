#include "core/common/child_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>

namespace kvscope {

void die_with_parent(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died between our start and the request; then we are another process's child now.
  if (getppid() != parent) _exit(125);
}

void die_with_parent_from_environment() {
  const char* text = std::getenv(kParentPidVariable);
  if (!text || !*text) return;
  char* end = nullptr;
  const long pid = std::strtol(text, &end, 10);
  if (end && *end == '\0' && pid > 0) die_with_parent(static_cast<pid_t>(pid));
}

}  // namespace kvscope
