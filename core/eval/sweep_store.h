#pragma once
// Where a sweep's results live: <dir>/grid.json (what the sweep is), <dir>/rows.csv (one line per finished
// cell, appended and flushed at once), <dir>/evidence.jsonl (RULER: per-layer evidence retention of each cell,
// written before its row) and <dir>/eval.h5 (the same rows as an HDF5 /eval group, rewritten
// through a temporary file and a rename, so a killed sweep leaves the previous complete file). Opening a
// directory again resumes it: finished cells are read back and only the missing ones run.
#include <cstddef>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/eval/bootstrap.h"
#include "core/eval/eval_run.h"

namespace kvscope::eval {

struct SweepCell {
  std::size_t index = 0;
  std::size_t prompt = 0;  // index into SweepGrid::prompts
  CellPolicy policy;
  std::string cache_type;  // the grid's name of policy.cache_type; empty in a grid without cache types
};

struct SweepGrid {
  std::string eval_kind;
  std::vector<std::string> prompts;         // names (file names, or generated needle cases)
  std::vector<std::string> prompt_digests;  // sha256 of each prompt's text: an edited prompt is another grid
  std::vector<std::string> policies, budgets;
  // --cache-types: how each cell's KV cache stores keys and values (kernels/kv_storage.h), a grid dimension
  // between policies and budgets; empty: every cell float32, and grid.json and rows.csv stay as before the option.
  std::vector<std::string> cache_types;
  // --cache-page N: every cell also counts its cache in pages of N tokens (paged_metric_names() become columns,
  // grid.json records "cache_page"); 0: not counted, and the files stay as before the option.
  int cache_page_tokens = 0;
  // sha256 of each policy's file (python:FILE, plugin:FILE), "" for a built-in: an edited scorer is another
  // grid. Recorded (as policy_sha256) only when the grid has a policy file, so built-in grids stay as they were.
  std::vector<std::string> policy_digests;
  nlohmann::json settings = nlohmann::json::object();  // new tokens, prompt tokens, model, ...

  std::size_t size() const { return prompts.size() * policies.size() * cache_type_count() * budgets.size(); }
  std::size_t cache_type_count() const { return cache_types.empty() ? 1 : cache_types.size(); }
  // The curves a summary or figure draws: the policies, or with cache types every (policy, cache type) as
  // "policy @type" (SweepRow::series).
  std::vector<std::string> series() const;
  // Cells run prompt by prompt, so a worker reuses one prompt's reference for all its cells.
  SweepCell cell(std::size_t index) const;
  // A prompt's cells of one cache type: their one-pass prefills are the same computation, which a process
  // captures once and replays for the others (run/prefill_store.h), so they are best run one after another.
  std::size_t prefill_group(std::size_t index) const;
  // `cells` in the order that shares that work: by prompt (whose full-cache reference is computed once), then
  // prefill group, then policy and budget. Rows are keyed by cell, so the order changes no result.
  std::vector<std::size_t> run_order(std::vector<std::size_t> cells) const;
  nlohmann::json to_json() const;
  // Throws UsageError for an unknown eval kind or an empty prompt, policy or budget list.
  void validate() const;
};

struct SweepRow {
  std::size_t cell = 0;
  std::string prompt, policy, budget;
  std::string cache_type;  // the cell's, as the grid names it; empty in a grid without cache types
  // "policy", or "policy @cache_type": what summaries and figures group rows by.
  std::string series() const { return cache_type.empty() ? policy : series_label(policy, cache_type); }
  static std::string series_label(const std::string& policy, const std::string& cache_type) {
    return policy + " @" + cache_type;
  }
  Metrics metrics;
  // RULER cells with evidence: per layer, the share of the evidence the cache held at the first answer token
  // (EvidenceRetention::layer_kept); empty otherwise. Stored apart from rows.csv, whose columns are fixed, in
  // <dir>/evidence.jsonl and eval.h5's /eval/evidence_layer_kept.
  std::vector<double> evidence_layer_kept;
  // The value of `name`, NaN when the row has no such metric (or it was not measured).
  double metric(const std::string& name) const;
  nlohmann::json to_json() const;
  static SweepRow from_json(const nlohmann::json& j);  // throws Error naming the missing field
};

// Mean of `metric` over the rows of (series, budget), i.e. over the prompts that have that cell; NaN when
// no such row has the metric (a NaN value is no measurement and is left out). The number every summary and
// figure of a sweep shows.
double cell_mean(const std::vector<SweepRow>& rows, const std::string& policy, const std::string& budget,
                 const std::string& metric);

struct CellSummary;

class SweepStore {
 public:
  // Creates the directory and its grid.json, or opens an existing sweep: throws UsageError when its grid
  // differs from `grid` (naming the field) or when the directory holds files but is not a sweep. Nothing is
  // written until the first append.
  SweepStore(const std::filesystem::path& dir, const SweepGrid& grid);

  bool done(std::size_t cell) const { return done_.count(cell) > 0; }
  std::size_t done_count() const { return done_.size(); }
  const std::vector<SweepRow>& rows() const { return rows_; }
  // Persists one finished cell (CSV line, then the HDF5 file). A cell already stored is an Error.
  void append(const SweepRow& row);
  // The intervals of every cell (sweep_summary.h) into summary.csv and eval.h5's /eval/summary; a sweep calls
  // it when it ends. The next append rewrites eval.h5 without the summary until the next call.
  void write_summary(const std::string& baseline, const BootstrapSettings& settings);
  std::filesystem::path summary_path() const { return dir_ / "summary.csv"; }

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path csv_path() const { return dir_ / "rows.csv"; }
  std::filesystem::path evidence_path() const { return dir_ / "evidence.jsonl"; }
  std::filesystem::path hdf5_path() const { return dir_ / "eval.h5"; }

 private:
  void read_csv();
  // Attaches evidence.jsonl's per-layer retention to the rows read back (a cell's last line wins; a torn last
  // line, or a line for a cell rows.csv does not have, belongs to a cell that runs again).
  void read_evidence();
  // "" when the row's prompt, policy and budget are its cell's in the grid, else what differs.
  std::string labels_contradiction(const SweepRow& row) const;
  void write_hdf5(const std::vector<CellSummary>* summary = nullptr, const BootstrapSettings* settings = nullptr,
                  const std::string* baseline = nullptr) const;

  std::filesystem::path dir_;
  SweepGrid grid_;
  std::vector<std::string> columns_;
  std::size_t first_metric_ = 4;  // columns_[first_metric_...] are the metrics
  std::vector<SweepRow> rows_;
  std::set<std::size_t> done_;
};

// Parses "a,b,c" into its items; an empty text or an empty item is a UsageError naming `what`.
std::vector<std::string> split_list(const std::string& text, const std::string& what);
// Like split_list, but an item with '=' and no ':' continues the previous policy's parameters:
// "snapkv:window=32,kernel=7,h2o" is snapkv with two parameters, then h2o.
std::vector<std::string> split_policy_list(const std::string& text);

}  // namespace kvscope::eval
