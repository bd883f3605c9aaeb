// A file written through write_file_atomically is whole or absent: the previous file stays until the new
// one is complete, and a failed write leaves neither a half-written target nor a partial file.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "tests/support/temp_file.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {
std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TEST_CASE("write_file_atomically replaces a file whole", "[common][atomic]") {
  const fs::path path = test::temp_file("atomic", ".txt");
  { std::ofstream(path) << "previous"; }
  write_file_atomically(path, std::string(1 << 20, 'x'), "test file");
  CHECK(read(path) == std::string(1 << 20, 'x'));
  CHECK_FALSE(fs::exists(path.string() + ".partial"));
  fs::remove(path);
}

TEST_CASE("a failed atomic write names the file and leaves the previous one", "[common][atomic]") {
  const fs::path dir = test::temp_file("atomic_dir", "");
  fs::create_directories(dir);
  try {
    write_file_atomically(dir, "data", "figure");
    FAIL("writing over a folder must fail");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("cannot write figure '" + dir.string() + "'") && Catch::Contains("folder"));
  }
  CHECK(fs::is_directory(dir));
  // A folder that does not exist: nothing is created anywhere.
  const fs::path missing = dir / "no_such" / "f.png";
  CHECK_THROWS_WITH(write_file_atomically(missing, "data", "PNG"),
                    Catch::Contains(missing.string()) && Catch::Contains("folder exists"));
  CHECK_FALSE(fs::exists(missing.string() + ".partial"));
  // /proc takes no new files, even for root: the open fails before anything is written.
  CHECK_THROWS_AS(write_file_atomically("/proc/kvscope_atomic_test", "data"), Error);
  fs::remove_all(dir);
}
