#pragma once
// Runs sweep cells in child processes: each child is `kvscope sweep ... --serve`, which loads the model once,
// reads cell indices on stdin (one per line) and answers each with one JSON row on stdout. Local workers
// get one cell at a time (the next when they answer); a batch worker (the Ray driver) gets every cell at
// once and its stdin closed. Only the parent writes the sweep's files.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvscope::app {

struct WorkerCommand {
  std::vector<std::string> argv;  // argv[0] is the program, found on PATH when it has no '/'
  bool batch = false;
};

// Calls on_result on this thread for every answer ({"cell", ...row} or {"cell", "error"}), in arrival
// order. Throws Error when a worker cannot start, writes a line that is not JSON, or exits before
// answering its cells (naming the worker and the cells left).
void run_in_workers(const std::vector<WorkerCommand>& workers, const std::vector<std::size_t>& cells,
                    const std::function<void(const nlohmann::json&)>& on_result);

// This process's own command line (set by main) and executable, for starting workers of itself.
void set_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();
std::string self_executable();

}  // namespace kvscope::app
