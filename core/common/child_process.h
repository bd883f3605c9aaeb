#pragma once
// Children kvscope starts (trace probes, sweep workers, the Ray driver) die with it, however it dies: kill -9,
// a script's timeout or an IDE stopping it included. A child left behind would spin on a damaged file or wait
// for cells forever.
#include <sys/types.h>

namespace kvscope {

// The environment variable a spawned child reads its parent's pid from (posix_spawn runs no code of ours
// between fork and exec, so the child arms itself).
inline constexpr const char* kParentPidVariable = "KVSCOPE_PARENT_PID";

// Asks the kernel to SIGKILL this process when `parent` dies, and exits at once (status 125) when it has
// died already (the request only covers deaths after it). Async-signal-safe: callable in a forked child
// before exec, where the request survives the exec.
void die_with_parent(pid_t parent);

// In a spawned child: die_with_parent(the pid in kParentPidVariable), when the variable is set.
void die_with_parent_from_environment();

}  // namespace kvscope
