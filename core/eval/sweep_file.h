#pragma once
// Reading a finished (or running) sweep back for a viewer: its rows.csv, its eval.h5 (/eval group) or the
// sweep folder that holds them. The sweep store (sweep_store.h) writes these files; this side only reads,
// and refuses anything malformed with an Error naming the file, the line or dataset, and what was expected.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/eval/sweep_store.h"

namespace kvscope::eval {

struct SweepTable {
  std::filesystem::path path;        // the file actually read
  std::string eval_kind;             // fidelity, ppl, needle; empty when the columns match none of them
  std::vector<std::string> metrics;  // metric columns, in the file's order
  std::vector<SweepRow> rows;
};

// Reads `path`: a .csv, an HDF5 file, or a folder (its rows.csv, else its eval.h5). Throws Error.
// HDF5 is parsed in this process: for a file from elsewhere use open_sweep_file.
SweepTable read_sweep_file(const std::filesystem::path& path);

// read_sweep_file, but an HDF5 file is first read whole in a child process (trace/trace_probe.h), so a
// damaged file becomes an Error("sweep file ... is damaged ...") instead of a crash of the caller.
SweepTable open_sweep_file(const std::filesystem::path& path);

// The hidden first argument of the child open_sweep_file starts; main() of every executable that opens
// sweep files calls run_sweep_probe_if_asked first (like run_trace_probe_if_asked).
inline constexpr const char* kSweepProbeArgument = "__probe-sweep";
std::optional<int> run_sweep_probe_if_asked(int argc, char** argv);

}  // namespace kvscope::eval
