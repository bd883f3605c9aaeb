#include "core/policy/shipped_policies.h"

#include <algorithm>
#include <regex>
#include <system_error>

#include "core/common/project_paths.h"

namespace kvscope::policy {

std::optional<std::filesystem::path> shipped_policies_dir() {
  for (const auto& dir : project_path_candidates("examples/policies")) {
    std::error_code ec;
    if (std::filesystem::is_directory(dir, ec)) return dir;
  }
  return std::nullopt;
}

std::vector<std::filesystem::path> policy_files_in(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const auto& path = entry.path();
    const std::string name = path.filename().string();
    std::error_code type_ec;
    if (!entry.is_regular_file(type_ec) || path.extension() != ".py" || name.front() == '_') continue;
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::filesystem::path> shipped_policy_files() {
  const auto dir = shipped_policies_dir();
  return dir ? policy_files_in(*dir) : std::vector<std::filesystem::path>{};
}

std::string ported_press(const std::string& summary) {
  static const std::regex kvpress(R"(kvpress's (\w+))");
  static const std::regex builtin(R"(built-in `(\w+)`)");
  std::smatch m;
  if (std::regex_search(summary, m, kvpress)) return "kvpress " + m[1].str();
  if (std::regex_search(summary, m, builtin)) return "built-in " + m[1].str();
  return "";
}

}  // namespace kvscope::policy
