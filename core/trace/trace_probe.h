#pragma once
// Checks a trace file in a separate process before the caller opens it. libhdf5 (1.10 in Debian)
// trusts the addresses inside a file, so a damaged file can crash the process that reads it; the probe's
// child walks all the metadata the reader will touch (trace_walk.h) and reports over a pipe. A child
// killed by a signal, or still running at the time limit, becomes an Error naming the file and the object
// it was reading. Every executable that calls probe_trace must start main() with
// run_trace_probe_if_asked (the child is this same executable, started afresh).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kvscope::trace {

// The hidden first argument that turns an executable into a probe child.
inline constexpr const char* kProbeArgument = "__probe-trace";

struct ProbeOptions {
  // A stuck library is killed after this many seconds; 0: probe_stall_limit_s of the file.
  double timeout_s = 0.0;
  // The child's command line, to which the trace path is appended; empty: this executable (through
  // /proc/self/exe, which survives a rebuild while the window is open) with kProbeArgument.
  std::vector<std::string> command;
  std::string what = "trace file";  // how messages name the file ("sweep file" for a sweep's eval.h5)
};

// How long a child may take on a file of `bytes` before it counts as stuck: a few seconds to start plus a
// budget per MB, both far above what good traces take (docs/architecture.md, Opening traces safely).
// KVSCOPE_PROBE_TIMEOUT (seconds) replaces it.
double probe_stall_limit_s(std::uintmax_t bytes);

// Returns when the child walked the whole file. Throws Error with the child's own message when the file
// is refused cleanly (not HDF5, not a trace, a missing attribute ...), and Error("trace file ... is
// damaged ...") when the child crashed, was killed or timed out.
void probe_trace(const std::filesystem::path& path, const ProbeOptions& options = {});

// In a probe child (argv[1] == kProbeArgument, argv[2] the trace): walks the file, reports and returns
// the exit code; otherwise returns nothing and main() goes on.
std::optional<int> run_trace_probe_if_asked(int argc, char** argv);

// The child's side for any kind of file: caps its resources, runs `walk` (which calls `at` before each
// object it touches), reports to the parent (naming the file as `what`) and returns the exit code. Other
// probes (a sweep's eval.h5) use it with their own hidden argument and walk.
using ProbeWalk = std::function<void(const std::filesystem::path&, const std::function<void(const std::string&)>& at)>;
int run_probe_child(const std::string& path, const std::string& what, const ProbeWalk& walk);

}  // namespace kvscope::trace
