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

// Where a cell's shared work lives: its prompt (the full-cache reference) and its prefill group (a prompt's
// cells of one cache type, whose one-pass prefill a worker captures once: eval::SweepGrid::prefill_group).
struct CellLocality {
  std::size_t prompt = 0, group = 0;
};

// Calls on_result on this thread for every answer ({"cell", ...row} or {"cell", "error"}), in arrival
// order. A free local worker gets the next cell of the group it is in, else of a group of its prompt that no
// other worker is in, else of a prompt no other worker is in, else of any group no other worker is in, else
// the next queued cell: workers rarely compute the same prompt's reference or the same group's prefill. Throws Error when a worker cannot start, writes a line that
// is not JSON, or exits before answering its cells (naming the worker and the cells left).
void run_in_workers(const std::vector<WorkerCommand>& workers, const std::vector<std::size_t>& cells,
                    const std::function<CellLocality(std::size_t)>& locality,
                    const std::function<void(const nlohmann::json&)>& on_result);

// This process's own command line (set by main) and executable, for starting workers of itself.
void set_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();
std::string self_executable();

}  // namespace kvscope::app
