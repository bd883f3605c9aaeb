#pragma once
// The window shares the CPU with its own rendering (and, under software GL, with llvmpipe's threads). An
// OpenMP team that busy-waits at its ~150 barriers per decoded token then spins against a preempted
// teammate: on a loaded 2-core machine a 32-token run took 117 s with libgomp's default spinning and 4.8 s
// with passive waiting (docs/benchmarks.md). libgomp reads its wait policy once, when it is loaded, so
// the only way to change it for this process is to start it again with the variable set.

namespace kvscope::app {

// Unless the user chose a policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT is set), re-executes this program with
// OMP_WAIT_POLICY=passive and the same arguments; returns only when nothing had to change or when the
// re-exec failed (the run then goes on with the default policy, and says so on stderr).
void prefer_passive_openmp_wait();

// The command line's runs (generate, trace, eval, sweep): a team that spins a short while at a barrier and
// then sleeps. libgomp's default spins up to 300 000 times, which collapses when another process takes a core
// (decode 265 ms/token beside two CPU hogs on this 2-core machine, against 16 ms quiet); passive waiting
// survives that (30 ms/token) but costs a futex wake-up at each of ~150 barriers a token when quiet (28 ms
// instead of 16). Spinning 30 000 times keeps both: 15.7 ms/token quiet, 32.6 ms beside the hogs
// (docs/benchmarks.md). Same rule as above: only when the user set neither variable.
inline constexpr const char* kBoundedSpinCount = "30000";
void prefer_bounded_openmp_spin();

}  // namespace kvscope::app
