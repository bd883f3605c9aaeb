#pragma once
// Numbers a policy exposes about its decisions, by name, so the recorder can store them without knowing
// the policy: e.g. "layer_variance" [layers], "budgets" per stage, "threshold" per step. Also the settings a
// run actually used (derived ones included: shares, thresholds, protocol switches) and warnings about
// configurations that silently turn a policy into another, both written to the run's metadata.
#include <map>
#include <string>
#include <vector>

namespace kvscope::policy {

struct Series {
  std::vector<double> values;       // row-major
  std::vector<int> shape;           // e.g. {layers} or {stages, layers}
  std::vector<std::string> dims;    // dimension names, e.g. {"stage", "layer"}
  std::string description;          // what the numbers are, citing the paper's equation
};

class Diagnostics {
 public:
  // Replaces the series `name`.
  void set(const std::string& name, Series series) { series_[name] = std::move(series); }
  // Appends one row to a series whose first dimension grows (stages, steps).
  void append_row(const std::string& name, const std::vector<double>& row, const std::string& row_dim,
                  const std::string& column_dim, const std::string& description);
  const std::map<std::string, Series>& all() const { return series_; }
  const Series* find(const std::string& name) const {
    auto it = series_.find(name);
    return it == series_.end() ? nullptr : &it->second;
  }

  // An effective setting as a JSON value (`"0.75"`, `[[12, 40], [8, 8]]`, `"\"before_output\""`).
  void set_setting(const std::string& name, std::string json_value) { settings_[name] = std::move(json_value); }
  const std::map<std::string, std::string>& settings() const { return settings_; }
  // A departure the researcher must see (the CLI prints it; the trace stores it). Repeats are dropped.
  void warn(const std::string& message);
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::map<std::string, Series> series_;
  std::map<std::string, std::string> settings_;
  std::vector<std::string> warnings_;
};

}  // namespace kvscope::policy
