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

namespace {

// Unless the user chose a policy, re-executes this program with `variable`=`value` and the same arguments.
void restart_with(const char* variable, const char* value, const char* consequence) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  const std::vector<std::string>& args = command_line();
  if (args.empty()) return;
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  setenv(variable, value, 1);
  execv("/proc/self/exe", argv.data());
  // Still here: the exec failed; this process keeps the policy it loaded with.
  unsetenv(variable);
  std::fprintf(stderr, "kvscope: could not restart with %s=%s (%s); %s\n", variable, value, std::strerror(errno),
               consequence);
}

}  // namespace

void prefer_passive_openmp_wait() {
  restart_with("OMP_WAIT_POLICY", "passive", "model runs may be slow while the window draws");
}

void prefer_bounded_openmp_spin() {
  restart_with("GOMP_SPINCOUNT", kBoundedSpinCount, "runs may slow down badly when other processes share the cores");
}

}  // namespace kvscope::app
