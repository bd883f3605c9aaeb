#pragma once
// Reads a trace file (docs/trace-format.md) into a TraceView. Bad input never crashes: a file that is not
// HDF5, an HDF5 file that is not a kvscope trace, or a truncated file gives an Error naming the file and
// the object; a run whose writer stopped early (complete = 0) loads with a warning.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/trace/trace_view.h"

namespace kvscope::trace {

struct ReadOptions {
  bool maps = true;             // attention / similarity / decode maps (the bulk of a file)
  bool kept_mask = true;
  std::vector<std::string> runs;  // only these runs (empty: all)
  bool qk = true;               // exact attention's queries, keys and log-sum-exp (`qk/`, linear in the prompt)
};

TraceView read_trace(const std::filesystem::path& path, const ReadOptions& options = {});

// A summary without loading maps: run names, groups, dataset shapes and dtypes, attributes.
struct DatasetInfo {
  std::string path;             // relative to the run group
  std::vector<unsigned long long> shape;
  std::string dtype;            // "float16", "float32", "int32", "uint8", "string", "compound" ...
};
struct RunSummary {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::vector<DatasetInfo> datasets;
  long long n_events = 0, n_evicted = 0, n_merged = 0, n_steps = 0, n_generated = 0;
  bool complete = false;
};
struct TraceSummary {
  std::map<std::string, std::string> attributes;  // root attributes
  std::vector<RunSummary> runs;
  std::vector<std::string> warnings;
};
TraceSummary summarize_trace(const std::filesystem::path& path);

}  // namespace kvscope::trace
