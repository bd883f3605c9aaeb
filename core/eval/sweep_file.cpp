#include "core/eval/sweep_file.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/common/error.h"
#include "core/eval/csv.h"
#include "core/trace/hdf5_util.h"
#include "core/trace/trace_probe.h"
#include "core/trace/trace_walk.h"

namespace kvscope::eval {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kKeyColumns = {"cell", "prompt", "policy", "budget"};
// Members of /eval that are no metric column: the row's cache type, and what SweepStore writes beside the rows
// (the per-layer evidence of RULER rows, and the /eval/summary group of a finished sweep).
const std::vector<std::string> kNonMetricMembers = {"cache_type", "evidence_layer_kept", "summary"};

// A kind's columns, and those followed by the paged counts of a sweep made with --cache-page.
std::vector<std::vector<std::string>> column_sets(const std::string& kind) {
  std::vector<std::string> paged = metric_names(kind);
  paged.insert(paged.end(), paged_metric_names().begin(), paged_metric_names().end());
  return {metric_names(kind), paged};
}

// The kind whose metric columns these are, or "".
std::string kind_of(const std::vector<std::string>& metrics) {
  for (const auto& kind : eval_kinds())
    for (const auto& columns : column_sets(kind))
      if (columns == metrics) return kind;
  return "";
}

double parse_number(const std::string& text, const std::string& where) {
  std::size_t used = 0;
  double v = 0.0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw Error(where + ": '" + text + "' is not a number");
  return v;
}

SweepTable read_csv(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read sweep file '" + path.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string name = "'" + path.string() + "'";
  SweepTable table;
  table.path = path;
  std::vector<std::string> columns;
  std::size_t key_columns = kKeyColumns.size();
  std::size_t start = 0;
  for (int line_no = 1; start < text.size(); ++line_no) {
    std::size_t end = text.find('\n', start);
    const bool torn = end == std::string::npos;  // a sweep killed mid-write leaves a line without its newline
    if (torn) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    const auto fields = parse_csv_line(line);
    const std::string where = name + " line " + std::to_string(line_no);
    if (line_no == 1) {
      if (fields.size() <= kKeyColumns.size() || !std::equal(kKeyColumns.begin(), kKeyColumns.end(), fields.begin()))
        throw Error(name + " is not a sweep's rows.csv: its header '" + line +
                    "' should start with cell,prompt,policy,budget and name at least one metric");
      columns = fields;
      // A sweep with --cache-types has a cache_type column after the key columns.
      key_columns = kKeyColumns.size() + (fields.size() > kKeyColumns.size() + 1 && fields[4] == "cache_type");
      table.metrics.assign(fields.begin() + static_cast<std::ptrdiff_t>(key_columns), fields.end());
      continue;
    }
    if (torn && fields.size() != columns.size()) break;
    if (fields.size() != columns.size())
      throw Error(where + " has " + std::to_string(fields.size()) + " fields; the header names " +
                  std::to_string(columns.size()));
    SweepRow row;
    const double cell = parse_number(fields[0], where + ", column cell");
    if (cell < 0 || cell != std::floor(cell)) throw Error(where + ": cell '" + fields[0] + "' is not a cell index");
    row.cell = static_cast<std::size_t>(cell);
    row.prompt = fields[1], row.policy = fields[2], row.budget = fields[3];
    if (row.policy.empty()) throw Error(where + " has an empty policy");
    if (key_columns > kKeyColumns.size()) row.cache_type = fields[4];
    for (std::size_t i = key_columns; i < fields.size(); ++i)
      row.metrics.emplace_back(columns[i], parse_number(fields[i], where + ", column " + columns[i]));
    table.rows.push_back(std::move(row));
  }
  if (columns.empty()) throw Error(name + " is empty; expected a sweep's rows.csv");
  table.eval_kind = kind_of(table.metrics);
  return table;
}

SweepTable read_hdf5(const fs::path& path) {
  namespace h5 = trace::h5;
  h5::silence_errors();
  const std::string name = "'" + path.string() + "'";
  h5::Handle file = h5::open_read_only(path.string());
  if (!file.valid()) throw Error("cannot open sweep file " + name + " as HDF5: " + h5::last_error());
  if (!h5::exists(file, "eval")) throw Error(name + " has no /eval group; expected a sweep's eval.h5");
  h5::Handle group(H5Gopen2(file, "eval", H5P_DEFAULT));
  if (!group.valid()) throw Error(name + ": /eval is not a group");
  SweepTable table;
  table.path = path;
  auto dataset = [&](const std::string& d) {
    if (!h5::exists(group, d)) throw Error(name + " has no /eval/" + d + " dataset");
    h5::Handle handle(H5Dopen2(group, d.c_str(), H5P_DEFAULT));
    if (!handle.valid()) throw Error(name + ": /eval/" + d + " is not a dataset");
    if (h5::dataset_dims(handle).size() != 1) throw Error(name + ": /eval/" + d + " is not one-dimensional");
    return handle;
  };
  const auto prompts = h5::read_strings(dataset("prompt"));
  const auto policies = h5::read_strings(dataset("policy"));
  const auto budgets = h5::read_strings(dataset("budget"));
  const auto cells = h5::read_int64s(dataset("cell"));
  const std::size_t n = cells.size();
  for (const auto* column : {&prompts, &policies, &budgets})
    if (column->size() != n)
      throw Error(name + ": /eval datasets differ in length (" + std::to_string(column->size()) + " and " +
                  std::to_string(n) + " rows)");
  for (const auto& d : h5::list_group(group))
    if (std::find(kKeyColumns.begin(), kKeyColumns.end(), d) == kKeyColumns.end() &&
        std::find(kNonMetricMembers.begin(), kNonMetricMembers.end(), d) == kNonMetricMembers.end())
      table.metrics.push_back(d);
  if (table.metrics.empty()) throw Error(name + ": /eval has no metric datasets");
  // The store's column order when the metrics are a known kind's (list_group sorts by name).
  const auto stored_kind = h5::get_string_attr(group, "eval");
  if (stored_kind) {
    for (const auto& kind : eval_kinds())
      for (const auto& expected : column_sets(kind)) {
        std::vector<std::string> sorted = expected;
        std::sort(sorted.begin(), sorted.end());
        if (kind == *stored_kind && sorted == table.metrics) table.metrics = expected;
      }
  }
  table.rows.resize(n);
  if (h5::exists(group, "cache_type")) {  // a sweep with --cache-types
    const auto types = h5::read_strings(dataset("cache_type"));
    if (types.size() != n)
      throw Error(name + ": /eval/cache_type has " + std::to_string(types.size()) + " values for " +
                  std::to_string(n) + " rows");
    for (std::size_t i = 0; i < n; ++i) table.rows[i].cache_type = types[i];
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (cells[i] < 0) throw Error(name + ": /eval/cell[" + std::to_string(i) + "] is negative");
    if (policies[i].empty()) throw Error(name + ": /eval/policy[" + std::to_string(i) + "] is empty");
    table.rows[i].cell = static_cast<std::size_t>(cells[i]);
    table.rows[i].prompt = prompts[i], table.rows[i].policy = policies[i], table.rows[i].budget = budgets[i];
  }
  for (const auto& metric : table.metrics) {
    const auto values = h5::read_doubles(dataset(metric));
    if (values.size() != n)
      throw Error(name + ": /eval/" + metric + " has " + std::to_string(values.size()) + " values for " +
                  std::to_string(n) + " rows");
    for (std::size_t i = 0; i < n; ++i) table.rows[i].metrics.emplace_back(metric, values[i]);
  }
  table.eval_kind = kind_of(table.metrics);
  return table;
}

bool is_hdf5(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  return in.gcount() == 8 && std::string(magic, 8) == "\x89HDF\r\n\x1a\n";
}

// A folder stands for the file in it; a file stands for itself.
fs::path sweep_file_of(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error("sweep file '" + path.string() + "' does not exist");
  if (!fs::is_directory(path, ec)) return path;
  for (const char* name : {"rows.csv", "eval.h5"})
    if (fs::exists(path / name, ec)) return path / name;
  throw Error("folder '" + path.string() + "' holds no rows.csv or eval.h5; expected a sweep folder");
}

}  // namespace

SweepTable read_sweep_file(const fs::path& path) {
  const fs::path file = sweep_file_of(path);
  return is_hdf5(file) ? read_hdf5(file) : read_csv(file);
}

SweepTable open_sweep_file(const fs::path& path) {
  const fs::path file = sweep_file_of(path);
  if (is_hdf5(file)) {
    trace::ProbeOptions options;
    options.command = {"/proc/self/exe", kSweepProbeArgument};
    options.what = "sweep file";
    trace::probe_trace(file, options);
  }
  return read_sweep_file(file);
}

std::optional<int> run_sweep_probe_if_asked(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) != kSweepProbeArgument) return std::nullopt;
  if (argc != 3) return 2;
  return trace::run_probe_child(argv[2], "sweep file", [](const fs::path& p, const auto& at) {
    trace::walk_hdf5_structure(p, at);
    at("the sweep reader's pass over /eval");
    read_sweep_file(p);
  });
}

}  // namespace kvscope::eval
