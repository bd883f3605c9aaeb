#include "core/common/project_paths.h"

#include <system_error>

namespace kvscope {

std::vector<std::filesystem::path> project_path_candidates(const std::filesystem::path& relative) {
  std::vector<std::filesystem::path> out = {std::filesystem::path(KVSCOPE_SOURCE_DIR) / relative};
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && !exe.empty()) {
    const auto dir = exe.parent_path();
    out.push_back(dir.parent_path() / relative);                // <prefix>/bin/kvscope
    out.push_back(dir.parent_path().parent_path() / relative);  // <source>/build/app/kvscope
  }
  return out;
}

}  // namespace kvscope
