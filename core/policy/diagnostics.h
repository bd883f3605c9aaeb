#pragma once
// Numbers a policy exposes about its decisions, by name, so the recorder can store them without knowing
// the policy: e.g. "layer_variance" [layers], "budgets" per stage, "threshold" per step.
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

 private:
  std::map<std::string, Series> series_;
};

}  // namespace kvscope::policy
