#include "app/sweep_workers.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>
#include <set>

#include "core/common/child_process.h"
#include "core/common/error.h"

namespace kvscope::app {

namespace {

std::vector<std::string>& stored_command_line() {
  static std::vector<std::string> args;
  return args;
}

struct Worker {
  pid_t pid = -1;
  int to_child = -1, from_child = -1;
  std::string buffer;
  std::set<std::size_t> outstanding;
  std::optional<CellLocality> last;  // the locality of the last cell sent
  bool batch = false, eof = false;
  std::string name;
};

Worker start(const WorkerCommand& command, int index) {
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0)
    throw Error("cannot create pipes for a sweep worker");
  std::vector<char*> argv;
  for (const auto& a : command.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw Error("cannot fork a sweep worker: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    die_with_parent(parent);  // a killed sweep takes its workers (and the Ray driver) with it
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "kvscope: cannot start sweep worker '%s': %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  Worker w;
  w.pid = pid;
  w.to_child = in_pipe[1];
  w.from_child = out_pipe[0];
  w.batch = command.batch;
  w.name = "worker " + std::to_string(index) + " (" + command.argv[0] + ")";
  return w;
}

void send(Worker& w, std::size_t cell) {
  const std::string line = std::to_string(cell) + "\n";
  if (write(w.to_child, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    throw Error(w.name + " stopped reading cells");
  w.outstanding.insert(cell);
}

// "exited with status 0", "was killed by signal 11 (Segmentation fault)".
std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = strsignal(WTERMSIG(status));
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + (name ? " (" + std::string(name) + ")" : "");
  }
  return "ended with wait status " + std::to_string(status);
}

// The queued cell `w` should run next (see run_in_workers); the queue is not empty.
std::deque<std::size_t>::iterator next_cell(std::deque<std::size_t>& queue, const Worker& w,
                                            const std::vector<Worker>& workers,
                                            const std::function<CellLocality(std::size_t)>& locality) {
  std::set<std::size_t> taken_groups, taken_prompts;  // where the other workers are
  for (const auto& other : workers)
    if (&other != &w && other.last && !other.eof)
      taken_groups.insert(other.last->group), taken_prompts.insert(other.last->prompt);
  auto same_prompt = queue.end(), free_prompt = queue.end(), free_group = queue.end();
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    const CellLocality l = locality(*it);
    if (w.last && l.group == w.last->group) return it;
    if (taken_groups.count(l.group)) continue;
    if (w.last && l.prompt == w.last->prompt && same_prompt == queue.end()) same_prompt = it;
    if (!taken_prompts.count(l.prompt) && free_prompt == queue.end()) free_prompt = it;
    if (free_group == queue.end()) free_group = it;
  }
  for (const auto& it : {same_prompt, free_prompt, free_group})
    if (it != queue.end()) return it;
  return queue.begin();
}

void send_next(Worker& w, std::deque<std::size_t>& queue, const std::vector<Worker>& workers,
               const std::function<CellLocality(std::size_t)>& locality) {
  const auto it = next_cell(queue, w, workers, locality);
  const std::size_t cell = *it;
  queue.erase(it);
  send(w, cell);
  w.last = locality(cell);
}

void close_input(Worker& w) {
  if (w.to_child >= 0) close(w.to_child);
  w.to_child = -1;
}

}  // namespace

void set_command_line(int argc, char** argv) { stored_command_line().assign(argv, argv + argc); }
const std::vector<std::string>& command_line() { return stored_command_line(); }

std::string self_executable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find this program's path in /proc/self/exe: " + ec.message());
  return path.string();
}

void run_in_workers(const std::vector<WorkerCommand>& commands, const std::vector<std::size_t>& cells,
                    const std::function<CellLocality(std::size_t)>& locality,
                    const std::function<void(const nlohmann::json&)>& on_result) {
  signal(SIGPIPE, SIG_IGN);  // a dead worker must surface as an error, not kill the parent
  std::deque<std::size_t> queue(cells.begin(), cells.end());
  std::vector<Worker> workers;
  for (std::size_t i = 0; i < commands.size(); ++i) workers.push_back(start(commands[i], static_cast<int>(i)));
  for (auto& w : workers) {
    if (w.batch) {
      while (!queue.empty()) send(w, queue.front()), queue.pop_front();
    } else if (!queue.empty()) {
      send_next(w, queue, workers, locality);
    }
    if (w.batch || w.outstanding.empty()) close_input(w);  // a batch worker reads until end of input
  }
  std::string failure;
  const Worker* ended_early = nullptr;  // a worker that stopped with cells unanswered: its status says how
  while (failure.empty()) {
    std::vector<pollfd> fds;
    std::vector<Worker*> polled;
    for (auto& w : workers)
      if (!w.eof) fds.push_back({w.from_child, POLLIN, 0}), polled.push_back(&w);
    if (fds.empty()) break;
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw Error("poll on sweep workers failed: " + std::string(std::strerror(errno)));
    }
    for (std::size_t i = 0; i < fds.size() && failure.empty(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Worker& w = *polled[i];
      char buf[65536];
      const ssize_t n = read(w.from_child, buf, sizeof buf);
      if (n <= 0) {
        w.eof = true;
        if (!w.outstanding.empty()) {
          // Whatever its exit status (a policy's exit(0) included), unanswered cells are a failure.
          std::string cells;
          for (const std::size_t c : w.outstanding) cells += (cells.empty() ? "" : ", ") + std::to_string(c);
          failure = w.name + " ended before answering cell(s) " + cells;
          ended_early = &w;
        }
        continue;
      }
      w.buffer.append(buf, static_cast<std::size_t>(n));
      for (std::size_t nl; failure.empty() && (nl = w.buffer.find('\n')) != std::string::npos;) {
        const std::string line = w.buffer.substr(0, nl);
        w.buffer.erase(0, nl + 1);
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception&) {
          failure = w.name + " wrote a line that is not a JSON row: '" + line.substr(0, 200) + "'";
          break;
        }
        const std::size_t cell = j.value("cell", static_cast<std::size_t>(-1));
        if (!w.outstanding.erase(cell)) {
          failure = w.name + " answered cell " + std::to_string(cell) + ", which it was not given";
          break;
        }
        try {
          on_result(j);
        } catch (const std::exception& e) {
          failure = e.what();
          break;
        }
        if (!w.batch) {
          if (!queue.empty())
            send_next(w, queue, workers, locality);
          else
            close_input(w);
        }
      }
    }
  }
  for (auto& w : workers) {
    close_input(w);
    if (!failure.empty()) kill(w.pid, SIGTERM);
    int status = 0;
    waitpid(w.pid, &status, 0);
    close(w.from_child);
    if (&w == ended_early)
      failure += ": it " + exit_text(status) + " (its messages above say why)";
    else if (failure.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      failure = w.name + " " + exit_text(status);
  }
  if (!failure.empty()) throw Error("sweep: " + failure + "; finished cells are saved, run the sweep again to resume");
}

}  // namespace kvscope::app
