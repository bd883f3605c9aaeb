#include "core/eval/sweep_store.h"

#include "core/eval/sweep_summary.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <utility>
#include <limits>
#include <map>
#include <sstream>

#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "core/eval/csv.h"
#include "core/trace/hdf5_util.h"

namespace kvscope::eval {

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes the whole text and fsyncs, so a line is either complete on disk or absent after a kill. rows.csv grows
// in place (resuming reads it back), so it is the one file not written through an AtomicFile: a link in its
// place is refused rather than followed.
void append_durably(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0 && errno == ELOOP) throw Error("'" + path.string() + "' is a link; refusing to append through it");
  if (fd < 0) throw Error("cannot open '" + path.string() + "' for appending");
  const ssize_t written = ::write(fd, text.data(), text.size());
  const bool ok = written == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) throw Error("cannot append to '" + path.string() + "' (disk full?)");
}

}  // namespace

std::vector<std::string> split_list(const std::string& text, const std::string& what) {
  std::vector<std::string> items;
  std::string current;
  for (char c : text + ",") {
    if (c != ',') {
      current += c;
      continue;
    }
    const auto b = current.find_first_not_of(' '), e = current.find_last_not_of(' ');
    if (b == std::string::npos) throw UsageError("empty item in the " + what + " list '" + text + "'");
    items.push_back(current.substr(b, e - b + 1));
    current.clear();
  }
  return items;
}

std::vector<std::string> split_policy_list(const std::string& text) {
  std::vector<std::string> policies;
  for (const auto& item : split_list(text, "policy")) {
    const bool continues = item.find('=') != std::string::npos && item.find(':') == std::string::npos;
    if (continues && !policies.empty())
      policies.back() += "," + item;
    else
      policies.push_back(item);
  }
  return policies;
}

SweepCell SweepGrid::cell(std::size_t index) const {
  if (index >= size())
    throw Error("cell " + std::to_string(index) + " is outside the grid of " + std::to_string(size()) + " cells");
  const std::size_t per_policy = cache_type_count() * budgets.size(), per_prompt = policies.size() * per_policy;
  SweepCell c;
  c.index = index;
  c.prompt = index / per_prompt;
  c.policy.policy = policies[(index % per_prompt) / per_policy];
  c.policy.budget = budgets[index % budgets.size()];
  if (!cache_types.empty()) {
    c.cache_type = cache_types[(index % per_policy) / budgets.size()];
    c.policy.cache_type = kernels::parse_cache_types(c.cache_type);
  }
  c.policy.cache_page_tokens = cache_page_tokens;
  return c;
}

std::size_t SweepGrid::prefill_group(std::size_t index) const {
  const std::size_t per_policy = cache_type_count() * budgets.size(), per_prompt = policies.size() * per_policy;
  return (index / per_prompt) * cache_type_count() + (index % per_policy) / budgets.size();
}

std::vector<std::size_t> SweepGrid::run_order(std::vector<std::size_t> cells) const {
  // Within a prefill group, in index order: policy, then budget.
  std::sort(cells.begin(), cells.end(), [this](std::size_t a, std::size_t b) {
    return std::pair(prefill_group(a), a) < std::pair(prefill_group(b), b);
  });
  return cells;
}

std::vector<std::string> SweepGrid::series() const {
  if (cache_types.empty()) return policies;
  std::vector<std::string> out;
  for (const auto& policy : policies)
    for (const auto& type : cache_types) out.push_back(SweepRow::series_label(policy, type));
  return out;
}

nlohmann::json SweepGrid::to_json() const {
  nlohmann::json j = {{"eval", eval_kind},    {"prompts", prompts}, {"prompt_sha256", prompt_digests},
                      {"policies", policies}, {"budgets", budgets}, {"settings", settings}};
  if (std::any_of(policy_digests.begin(), policy_digests.end(), [](const std::string& d) { return !d.empty(); }))
    j["policy_sha256"] = policy_digests;
  if (!cache_types.empty()) j["cache_types"] = cache_types;
  if (cache_page_tokens > 0) j["cache_page"] = cache_page_tokens;
  return j;
}

namespace {

// The resume refusal for a policy file whose content changed: names the policy and both digests.
void check_policy_files(const nlohmann::json& stored, const SweepGrid& grid, const fs::path& dir) {
  const nlohmann::json& before = stored.contains("policy_sha256") ? stored["policy_sha256"] : nlohmann::json();
  for (std::size_t i = 0; i < grid.policies.size() && i < grid.policy_digests.size(); ++i) {
    const std::string now = grid.policy_digests[i];
    const bool recorded = before.is_array() && i < before.size() && before[i].is_string();
    const std::string was = recorded ? before[i].get<std::string>() : "";
    if (now == was) continue;
    throw UsageError("the sweep in '" + dir.string() + "' was started with another content of the policy file of '" +
                     grid.policies[i] + "' (sha256 " + (recorded ? was : "not recorded") + ", now " + now +
                     "): its rows would mix two scorers under one name; nothing was changed. Restore the file, or "
                     "choose another --out directory");
  }
}

}  // namespace

void SweepGrid::validate() const {
  metric_names(eval_kind);  // throws for an unknown kind
  if (prompts.empty()) throw UsageError("the sweep has no prompts");
  if (policies.empty()) throw UsageError("the sweep has no policies: pass --policies a,b,...");
  if (budgets.empty()) throw UsageError("the sweep has no budgets: pass --budgets 10%,25%,...");
  for (const auto& type : cache_types) kernels::parse_cache_types(type);  // names the bad one
  if (cache_page_tokens != 0) {
    if (cache_types.empty()) kernels::check_cache_page(kernels::CacheType::F32, cache_page_tokens);
    for (const auto& type : cache_types) kernels::check_cache_page(kernels::parse_cache_types(type), cache_page_tokens);
  }
}

double SweepRow::metric(const std::string& name) const {
  for (const auto& [metric_name, value] : metrics)
    if (metric_name == name) return value;
  return std::numeric_limits<double>::quiet_NaN();
}

nlohmann::json SweepRow::to_json() const {
  nlohmann::json m = nlohmann::json::object();
  for (const auto& [name, value] : metrics) m[name] = value;
  nlohmann::json j = {{"cell", cell}, {"prompt", prompt}, {"policy", policy}, {"budget", budget}, {"metrics", m}};
  if (!cache_type.empty()) j["cache_type"] = cache_type;
  if (!evidence_layer_kept.empty()) j["evidence_layer_kept"] = evidence_layer_kept;
  return j;
}

SweepRow SweepRow::from_json(const nlohmann::json& j) {
  try {
    SweepRow row;
    row.cell = j.at("cell").get<std::size_t>();
    row.prompt = j.at("prompt").get<std::string>();
    row.policy = j.at("policy").get<std::string>();
    row.budget = j.at("budget").get<std::string>();
    row.cache_type = j.value("cache_type", std::string());
    for (const auto& [name, value] : j.at("metrics").items())
      row.metrics.emplace_back(name, value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>());
    if (j.contains("evidence_layer_kept")) row.evidence_layer_kept = j["evidence_layer_kept"].get<std::vector<double>>();
    return row;
  } catch (const nlohmann::json::exception& e) {
    throw Error("a sweep row needs cell, prompt, policy, budget and metrics: " + std::string(e.what()));
  }
}

double cell_mean(const std::vector<SweepRow>& rows, const std::string& policy, const std::string& budget,
                 const std::string& metric) {
  double sum = 0.0;
  int n = 0;
  for (const auto& r : rows)
    if (const double value = r.metric(metric); r.series() == policy && r.budget == budget && !std::isnan(value))
      sum += value, ++n;  // NaN: not measured for that row (or no such metric)
  return n ? sum / n : std::numeric_limits<double>::quiet_NaN();
}

SweepStore::SweepStore(const fs::path& dir, const SweepGrid& grid) : dir_(dir), grid_(grid) {
  grid_.validate();
  columns_ = {"cell", "prompt", "policy", "budget"};
  if (!grid_.cache_types.empty()) columns_.push_back("cache_type");
  first_metric_ = columns_.size();
  for (const auto& name : metric_names(grid.eval_kind)) columns_.push_back(name);
  if (grid_.cache_page_tokens > 0)
    for (const auto& name : paged_metric_names()) columns_.push_back(name);
  const fs::path grid_path = dir_ / "grid.json";
  if (fs::exists(grid_path)) {
    nlohmann::json stored;
    try {
      stored = nlohmann::json::parse(read_file(grid_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error("'" + grid_path.string() + "' is not valid JSON: " + e.what());
    }
    const nlohmann::json wanted = grid_.to_json();
    if (stored.is_object() && stored.value("policies", nlohmann::json()) == wanted["policies"])
      check_policy_files(stored, grid_, dir_);
    // A paged sweep resumed without --cache-page would lose its paged columns; the optional fields are compared
    // both ways.
    for (const char* optional_field : {"cache_page", "cache_types"})
      if (stored.is_object() && stored.contains(optional_field) && !wanted.contains(optional_field))
        throw UsageError("the sweep in '" + dir_.string() + "' was started with " + optional_field + " = " +
                         stored[optional_field].dump() + ", this run gives none; nothing was changed. Resume with the "
                         "same grid, or choose another --out directory");
    for (const auto& [field, value] : wanted.items())
      if (!stored.contains(field) || stored[field] != value)
        throw UsageError("the sweep in '" + dir_.string() + "' was started with " + field + " = " +
                         (stored.contains(field) ? stored[field].dump() : "(missing)") + ", this run asks for " +
                         value.dump() +
                         "; nothing was changed. Resume with the same grid, or choose another --out directory");
    if (fs::exists(csv_path())) read_csv();
    if (fs::exists(evidence_path())) read_evidence();
    return;
  }
  if (fs::exists(dir_) && !fs::is_directory(dir_))
    throw UsageError("--out '" + dir_.string() + "' is a file, not a directory");
  if (fs::exists(dir_) && !fs::is_empty(dir_))
    throw UsageError("--out '" + dir_.string() + "' holds files but no grid.json; refusing to write a sweep into it");
  fs::create_directories(dir_);
  write_file_atomically(grid_path, grid_.to_json().dump(2) + "\n");
}

void SweepStore::read_csv() {
  std::string text = read_file(csv_path());
  // A kill between write() calls cannot leave half a line (one write per line), but a crashed disk can:
  // a last line without its newline is dropped and its cell runs again.
  if (!text.empty() && text.back() != '\n')
    text.erase(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
  if (text.empty()) {
    // Not even a whole header (a full disk while it was written): nothing was stored, the file starts anew.
    fs::remove(csv_path());
    return;
  }
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const auto fields = parse_csv_line(line);
    if (line_no == 1) {
      if (fields != columns_) {
        std::string missing;
        for (const auto& c : columns_)
          if (std::find(fields.begin(), fields.end(), c) == fields.end()) missing += (missing.empty() ? "" : ", ") + c;
        const bool older = !missing.empty() && std::all_of(fields.begin(), fields.end(), [&](const std::string& f) {
          return std::find(columns_.begin(), columns_.end(), f) != columns_.end();
        });
        throw UsageError("'" + csv_path().string() + "' has columns '" + line + "', not the ones of a " +
                         grid_.eval_kind + " sweep" +
                         (older ? " (it lacks " + missing +
                                      ": an earlier kvscope wrote it; give this sweep a new --out folder)"
                                : ""));
      }
      continue;
    }
    if (fields.size() != columns_.size())
      throw Error("'" + csv_path().string() + "' line " + std::to_string(line_no) + " has " +
                  std::to_string(fields.size()) + " fields; expected " + std::to_string(columns_.size()));
    SweepRow row;
    try {
      row.cell = std::stoul(fields[0]);
      for (std::size_t i = first_metric_; i < fields.size(); ++i) row.metrics.emplace_back(columns_[i], std::stod(fields[i]));
    } catch (const std::exception&) {
      throw Error("'" + csv_path().string() + "' line " + std::to_string(line_no) +
                  " has a field that is not a number");
    }
    row.prompt = fields[1], row.policy = fields[2], row.budget = fields[3];
    if (first_metric_ > 4) row.cache_type = fields[4];
    if (row.cell >= grid_.size() || done_.count(row.cell))
      throw Error("'" + csv_path().string() + "' line " + std::to_string(line_no) + ": cell " + fields[0] +
                  " is outside the grid or appears twice");
    // A row is counted under its labels: labels that contradict its cell would put it under the wrong policy.
    const std::string contradiction = labels_contradiction(row);
    if (!contradiction.empty())
      throw Error("'" + csv_path().string() + "' line " + std::to_string(line_no) + ": " + contradiction +
                  "; the file was edited or mixes two sweeps. Remove that line to run the cell again");
    done_.insert(row.cell);
    rows_.push_back(std::move(row));
  }
  // Rewrite a dropped partial line away so the next append starts on a fresh line.
  if (text.size() != fs::file_size(csv_path())) write_file_atomically(csv_path(), text);
}

void SweepStore::read_evidence() {
  const std::string text = read_file(evidence_path());
  std::map<std::size_t, std::vector<double>> by_cell;
  std::size_t start = 0;
  for (int line_no = 1; start < text.size(); ++line_no) {
    const std::size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // torn by a kill: its row was never written either
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      by_cell[j.at("cell").get<std::size_t>()] = j.at("layer_kept").get<std::vector<double>>();
    } catch (const nlohmann::json::exception& e) {
      throw Error("'" + evidence_path().string() + "' line " + std::to_string(line_no) +
                  " is not a {cell, layer_kept} record: " + e.what());
    }
  }
  for (auto& row : rows_)
    if (auto it = by_cell.find(row.cell); it != by_cell.end()) row.evidence_layer_kept = it->second;
}

std::string SweepStore::labels_contradiction(const SweepRow& row) const {
  const SweepCell expected = grid_.cell(row.cell);
  if (row.policy == expected.policy.policy && row.budget == expected.policy.budget &&
      row.prompt == grid_.prompts[expected.prompt] && row.cache_type == expected.cache_type)
    return "";
  auto cache = [](const std::string& type) { return type.empty() ? std::string() : ", " + type; };
  return "the row for cell " + std::to_string(row.cell) + " is (" + row.prompt + ", " + row.policy + cache(row.cache_type) +
         ", " + row.budget + ") but the grid says (" + grid_.prompts[expected.prompt] + ", " + expected.policy.policy +
         cache(expected.cache_type) + ", " + expected.policy.budget + ")";
}

void SweepStore::append(const SweepRow& row) {
  if (done_.count(row.cell))
    throw Error("cell " + std::to_string(row.cell) + " is already stored in '" + csv_path().string() + "'");
  const std::string contradiction = labels_contradiction(row);
  if (!contradiction.empty()) throw Error(contradiction);
  std::string line;
  if (!fs::exists(csv_path())) {
    for (std::size_t i = 0; i < columns_.size(); ++i) line += (i ? "," : "") + columns_[i];
    line += "\n";
  }
  line += std::to_string(row.cell) + "," + csv_field(row.prompt) + "," + csv_field(row.policy) + "," +
          csv_field(row.budget);
  if (first_metric_ > 4) line += "," + csv_field(row.cache_type);
  for (std::size_t i = first_metric_; i < columns_.size(); ++i) {
    auto it =
        std::find_if(row.metrics.begin(), row.metrics.end(), [&](const auto& m) { return m.first == columns_[i]; });
    if (it == row.metrics.end())
      throw Error("row for cell " + std::to_string(row.cell) + " lacks metric '" + columns_[i] + "'");
    line += "," + csv_number(it->second);
  }
  // The retention first: a kill between the two writes leaves a record without a row, and the cell runs again.
  if (!row.evidence_layer_kept.empty())
    append_durably(evidence_path(),
                   nlohmann::json{{"cell", row.cell}, {"layer_kept", row.evidence_layer_kept}}.dump() + "\n");
  append_durably(csv_path(), line + "\n");
  done_.insert(row.cell);
  rows_.push_back(row);
  write_hdf5();
}

namespace {

// One dataset of a column of `items`: fixed-length strings, as in traces (no global heap for a damaged file to
// point anywhere), or float64.
template <class Item, class Field>
void write_string_column(hid_t group, const std::string& name, const std::vector<Item>& items, Field field) {
  namespace h5 = trace::h5;
  std::vector<std::string> values;
  std::size_t widest = 1;
  for (const auto& item : items) widest = std::max(widest, values.emplace_back(field(item)).size());
  h5::Handle type = h5::fixed_string_type(widest);
  const hsize_t n = items.size();
  h5::Handle d = h5::create_dataset(group, name, {type, {n}, {}, {}, 0, {}});
  if (n) h5::write_strings(d, values, 0);
}

template <class Item, class Field>
void write_number_column(hid_t group, const std::string& name, const std::vector<Item>& items, Field field) {
  namespace h5 = trace::h5;
  std::vector<double> values;
  for (const auto& item : items) values.push_back(field(item));
  const hsize_t n = items.size();
  h5::Handle d = h5::create_dataset(group, name, {H5T_IEEE_F64LE, {n}, {}, {}, 0, {}});
  if (n) h5::write_slab(d, H5T_NATIVE_DOUBLE, {0}, {n}, values.data());
}

// /eval/evidence_layer_kept (rows x layers, NaN for a row without evidence), when any row has evidence.
void write_evidence_layers(hid_t group, const std::vector<SweepRow>& rows) {
  namespace h5 = trace::h5;
  std::size_t layers = 0;
  for (const auto& r : rows) layers = std::max(layers, r.evidence_layer_kept.size());
  if (layers == 0) return;
  std::vector<double> values(rows.size() * layers, std::numeric_limits<double>::quiet_NaN());
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::copy(rows[i].evidence_layer_kept.begin(), rows[i].evidence_layer_kept.end(), values.begin() + i * layers);
  const hsize_t n = rows.size(), l = layers;
  h5::Handle d = h5::create_dataset(group, "evidence_layer_kept", {H5T_IEEE_F64LE, {n, l}, {}, {}, 0, {}});
  h5::write_slab(d, H5T_NATIVE_DOUBLE, {0, 0}, {n, l}, values.data());
}

// /eval/summary: one entry per (policy, budget, metric), as summary.csv; NaN differences without a baseline row.
void write_summary_group(hid_t eval_group, const std::vector<CellSummary>& summary, const BootstrapSettings& settings,
                         const std::string& baseline) {
  namespace h5 = trace::h5;
  h5::Handle group = h5::ensure_group(eval_group, "summary");
  h5::set_attr(group, "baseline", baseline);
  h5::set_attr(group, "bootstrap_resamples", static_cast<int64_t>(settings.resamples));
  h5::set_attr(group, "bootstrap_level", settings.level);
  h5::set_attr(group, "bootstrap_seed", static_cast<int64_t>(settings.seed));
  auto strings = [&](const std::string& name, auto field) { write_string_column(group, name, summary, field); };
  auto numbers = [&](const std::string& name, auto field) { write_number_column(group, name, summary, field); };
  strings("policy", [](const CellSummary& s) { return s.policy; });
  strings("budget", [](const CellSummary& s) { return s.budget; });
  strings("metric", [](const CellSummary& s) { return s.metric; });
  const double nan = std::numeric_limits<double>::quiet_NaN();
  numbers("n", [](const CellSummary& s) { return static_cast<double>(s.value.n); });
  numbers("mean", [](const CellSummary& s) { return s.value.mean; });
  numbers("ci_low", [](const CellSummary& s) { return s.value.low; });
  numbers("ci_high", [](const CellSummary& s) { return s.value.high; });
  numbers("diff", [&](const CellSummary& s) { return s.difference ? s.difference->mean : nan; });
  numbers("diff_ci_low", [&](const CellSummary& s) { return s.difference ? s.difference->low : nan; });
  numbers("diff_ci_high", [&](const CellSummary& s) { return s.difference ? s.difference->high : nan; });
}

}  // namespace

void SweepStore::write_summary(const std::string& baseline, const BootstrapSettings& settings) {
  const auto summary =
      summarize(grid_, rows_, {columns_.begin() + static_cast<std::ptrdiff_t>(first_metric_), columns_.end()}, baseline,
                settings);
  const std::string base = baseline_policy(grid_, baseline);
  write_summary_csv(summary_path(), summary, base);
  write_hdf5(&summary, &settings, &base);
}

void SweepStore::write_hdf5(const std::vector<CellSummary>* summary, const BootstrapSettings* settings,
                            const std::string* baseline) const {
  namespace h5 = trace::h5;
  h5::silence_errors();
  AtomicFile out(hdf5_path(), Existing::Replace, "sweep file");
  {
    h5::Handle file(h5::check(H5Fcreate(out.temp_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                              "cannot create '" + hdf5_path().string() + "'"));
    h5::Handle group = h5::ensure_group(file, "eval");
    h5::set_attr(group, "eval", grid_.eval_kind);
    h5::set_attr(group, "grid", grid_.to_json().dump());
    const hsize_t n = rows_.size();
    auto strings = [&](const std::string& name, auto field) { write_string_column(group, name, rows_, field); };
    strings("prompt", [](const SweepRow& r) { return r.prompt; });
    strings("policy", [](const SweepRow& r) { return r.policy; });
    strings("budget", [](const SweepRow& r) { return r.budget; });
    if (!grid_.cache_types.empty()) strings("cache_type", [](const SweepRow& r) { return r.cache_type; });
    std::vector<int64_t> cells;
    for (const auto& r : rows_) cells.push_back(static_cast<int64_t>(r.cell));
    h5::Handle cell_set = h5::create_dataset(group, "cell", {H5T_STD_I64LE, {n}, {}, {}, 0, {}});
    if (n) h5::write_slab(cell_set, H5T_NATIVE_INT64, {0}, {n}, cells.data());
    for (std::size_t i = first_metric_; i < columns_.size(); ++i)
      // append() refuses rows without every metric, so NaN here is a value that was not measured.
      write_number_column(group, columns_[i], rows_, [&](const SweepRow& r) { return r.metric(columns_[i]); });
    write_evidence_layers(group, rows_);
    if (summary) write_summary_group(group, *summary, *settings, *baseline);
  }
  out.commit();
}

}  // namespace kvscope::eval
