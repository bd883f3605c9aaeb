#include "app/openmp_wait_policy.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "app/sweep_workers.h"

namespace kvscope::app {

void prefer_passive_openmp_wait() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  const std::vector<std::string>& args = command_line();
  if (args.empty()) return;
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv.data());
  // Still here: the exec failed; this process keeps the policy it loaded with.
  std::fprintf(stderr, "kvscope gui: could not restart with OMP_WAIT_POLICY=passive (%s); model runs may be slow "
               "while the window draws\n", std::strerror(errno));
}

}  // namespace kvscope::app
