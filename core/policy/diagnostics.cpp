#include "core/policy/diagnostics.h"

#include <algorithm>

#include "core/common/error.h"

namespace kvscope::policy {

void Diagnostics::append_row(const std::string& name, const std::vector<double>& row, const std::string& row_dim,
                             const std::string& column_dim, const std::string& description) {
  Series& s = series_[name];
  if (s.shape.empty()) {
    s.shape = {0, static_cast<int>(row.size())};
    s.dims = {row_dim, column_dim};
    s.description = description;
  }
  if (s.shape[1] != static_cast<int>(row.size()))
    throw Error("diagnostic series '" + name + "': row of " + std::to_string(row.size()) + " values, expected " +
                std::to_string(s.shape[1]));
  s.values.insert(s.values.end(), row.begin(), row.end());
  ++s.shape[0];
}

void Diagnostics::warn(const std::string& message) {
  if (std::find(warnings_.begin(), warnings_.end(), message) == warnings_.end()) warnings_.push_back(message);
}

}  // namespace kvscope::policy
