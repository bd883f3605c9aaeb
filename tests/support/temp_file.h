#pragma once
// A fresh path under the system temp folder for a file a test writes (removed first, so a stale file from
// an earlier run never passes for this run's output). The process id keeps parallel suites apart.
#include <unistd.h>

#include <filesystem>
#include <string>

namespace kvscope::test {

inline std::filesystem::path temp_file(const std::string& name, const std::string& extension = ".h5") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvscope_tests";
  std::filesystem::create_directories(dir);
  const std::filesystem::path p = dir / (name + "_" + std::to_string(::getpid()) + extension);
  std::filesystem::remove(p);
  return p;
}

}  // namespace kvscope::test
