// Why a fresh process (posix_spawn of this executable) and not a plain fork(): the window calls the probe
// while other threads run, among them the trace writer thread, which may hold libhdf5's global lock (the
// library is built thread-safe), and OpenMP / OpenBLAS pools. A forked child inherits every lock in the
// state it had at the fork but none of the threads that would release it, so its first HDF5 call could
// wait forever (a false "timed out"), and POSIX allows it only async-signal-safe calls anyway. posix_spawn
// (vfork-like in glibc, safe from threaded processes) followed by exec gives the child a clean libhdf5.
#include "core/trace/trace_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <string_view>

#include "core/common/child_process.h"
#include "core/common/error.h"
#include "core/trace/trace_walk.h"

extern char** environ;

namespace kvscope::trace {

namespace {

// The child's report, one line each: "at <object>" before touching it, then "ok" or "error <message>".
constexpr std::string_view kAtPrefix = "at ";
constexpr std::string_view kOkLine = "ok";
constexpr std::string_view kErrorPrefix = "error ";

// Unbuffered, so that the last "at" line reaches the parent even when the next call crashes.
void report_line(std::string_view text) {
  std::string line(text);
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  line += '\n';
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// A damaged size field can make libhdf5 ask for terabytes; with a cap the allocation fails (a clean
// error) instead of paging the machine to a halt. Sanitizers reserve huge address ranges, so not there.
void limit_child_resources() {
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  if (!kSanitized) {
    rlimit memory{8ull << 30, 8ull << 30};
    setrlimit(RLIMIT_AS, &memory);
  }
}

std::string signal_text(int sig) {
  const char* name = strsignal(sig);
  return "signal " + std::to_string(sig) + (name ? std::string(", ") + name : std::string());
}

std::vector<std::string> child_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("OMP_NUM_THREADS=", 0) == 0 || entry.rfind("OPENBLAS_NUM_THREADS=", 0) == 0 ||
        entry.rfind(std::string(kParentPidVariable) + "=", 0) == 0)
      continue;
    env.emplace_back(entry);
  }
  // The walk computes nothing; thread pools would only cost start-up time.
  env.emplace_back("OMP_NUM_THREADS=1");
  env.emplace_back(std::string(kParentPidVariable) + "=" + std::to_string(getpid()));
  env.emplace_back("OPENBLAS_NUM_THREADS=1");
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

struct ChildResult {
  int status = 0;
  bool timed_out = false;
  std::string last_at;  // the object the child was touching last
  std::string error;    // the child's clean error message
  bool ok = false;
};

// Reads the child's report until it closes the pipe or the deadline passes (then kills it), and reaps it.
ChildResult collect(pid_t pid, int read_fd, double timeout_s) {
  ChildResult result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string pending;
  auto take_line = [&](const std::string& line) {
    if (line.rfind(kAtPrefix, 0) == 0)
      result.last_at = line.substr(kAtPrefix.size());
    else if (line == kOkLine)
      result.ok = true;
    else if (line.rfind(kErrorPrefix, 0) == 0)
      result.error = line.substr(kErrorPrefix.size());
  };
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{read_fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = read(read_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the child closed its end: it exited or died
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t start = 0, end;
    while ((end = pending.find('\n', start)) != std::string::npos) {
      take_line(pending.substr(start, end - start));
      start = end + 1;
    }
    pending.erase(0, start);
  }
  while (waitpid(pid, &result.status, 0) < 0 && errno == EINTR) {
  }
  return result;
}

}  // namespace

double probe_stall_limit_s(std::uintmax_t bytes) {
  if (const char* fixed = std::getenv("KVSCOPE_PROBE_TIMEOUT"); fixed && *fixed) {
    char* end = nullptr;
    const double s = std::strtod(fixed, &end);
    if (end && *end == '\0' && s > 0) return s;
  }
  // Good traces: 1.1 ms of CPU per MB (96 MB walked in 108 ms), 24 ms per MB of wall time on a 2-core machine
  // at load 20 (docs/benchmarks.md); 8 s covers starting the child on such a machine.
  constexpr double kStartS = 8.0, kPerMbS = 0.25;
  return kStartS + kPerMbS * static_cast<double>(bytes) / (1 << 20);
}

void probe_trace(const std::filesystem::path& path, const ProbeOptions& options) {
  const std::string p = path.string();
  std::error_code size_error;
  const std::uintmax_t bytes = std::filesystem::is_regular_file(path, size_error) ? std::filesystem::file_size(path, size_error) : 0;
  const double timeout_s = options.timeout_s > 0 ? options.timeout_s : probe_stall_limit_s(size_error ? 0 : bytes);
  const std::string& what = options.what;
  std::vector<std::string> argv = options.command;
  if (argv.empty()) argv = {"/proc/self/exe", kProbeArgument};
  argv.push_back(p);
  std::vector<std::string> env = child_environment();
  std::vector<char*> argv_ptrs = pointers(argv), env_ptrs = pointers(env);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    throw Error("cannot check " + what + " '" + p + "': pipe failed: " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int spawn_error = posix_spawn(&pid, argv_ptrs[0], &actions, nullptr, argv_ptrs.data(), env_ptrs.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawn_error != 0) {
    close(fds[0]);
    throw Error("cannot check " + what + " '" + p + "': starting '" + argv[0] +
                "' failed: " + std::strerror(spawn_error));
  }
  const ChildResult r = collect(pid, fds[0], timeout_s);
  close(fds[0]);

  const std::string where = r.last_at.empty() ? "its header" : r.last_at;
  const std::string unsafe = "; the file cannot be opened safely";
  if (r.timed_out) {
    char limit[96];
    std::snprintf(limit, sizeof limit, "%.1f s (the limit for %.1f MB; KVSCOPE_PROBE_TIMEOUT sets another)", timeout_s,
                  static_cast<double>(bytes) / (1 << 20));
    throw Error(what + " '" + p + "' is damaged: reading its structure did not finish within " + limit +
                " (stuck at " + where + ")" + unsafe);
  }
  if (WIFSIGNALED(r.status))
    throw Error(what + " '" + p + "' is damaged: the HDF5 library failed (" + signal_text(WTERMSIG(r.status)) +
                ") while reading " + where + unsafe);
  const int code = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1;
  if (code == 0 && r.ok) return;
  if (code == 1 && !r.error.empty()) throw Error(r.error);
  throw Error(what + " '" + p + "' is damaged: the process checking it ended with exit status " + std::to_string(code) +
              " while reading " + where + unsafe);
}

int run_probe_child(const std::string& path, const std::string& what, const ProbeWalk& walk) {
  die_with_parent_from_environment();  // a parent killed while libhdf5 loops here must not leave us spinning
  limit_child_resources();
  try {
    walk(path, [](const std::string& object) { report_line(std::string(kAtPrefix) + object); });
  } catch (const Error& e) {
    report_line(std::string(kErrorPrefix) + e.what());
    return 1;
  } catch (const std::exception& e) {  // bad_alloc from a damaged size, length_error ...
    report_line(std::string(kErrorPrefix) + what + " '" + path + "' is damaged: reading its structure failed (" +
                e.what() + ")");
    return 1;
  }
  report_line(kOkLine);
  return 0;
}

std::optional<int> run_trace_probe_if_asked(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) != kProbeArgument) return std::nullopt;
  if (argc != 3) {
    report_line(std::string(kErrorPrefix) + "usage: " + kProbeArgument + " TRACE_FILE");
    return 2;
  }
  return run_probe_child(argv[2], "trace file", walk_trace_metadata);
}

}  // namespace kvscope::trace
