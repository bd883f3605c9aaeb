// A file written through AtomicFile / write_file_atomically is whole or absent: the previous file stays until
// the new one is complete, a failed write leaves neither a half-written target nor a temporary file, nothing is
// written through a link, and an existing file is replaced only when the caller says so.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "core/common/output_is_input.h"
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
  CHECK(leftover_temporary_folders(path).empty());
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
                    Catch::Contains(missing.string()) && Catch::Contains("does not exist"));
  CHECK_FALSE(fs::exists(missing.parent_path()));
  // /proc takes no new files, even for root: the open fails before anything is written.
  CHECK_THROWS_AS(write_file_atomically("/proc/kvscope_atomic_test", "data"), Error);
  fs::remove_all(dir);
}

namespace {

// A fresh folder for one test case, removed at the end.
struct Folder {
  fs::path path;
  explicit Folder(const std::string& name) : path(test::temp_file(name, "")) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Folder() { fs::remove_all(path); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace

TEST_CASE("the temporary file is created fresh in a private folder, never through a planted link", "[common][atomic]") {
  Folder dir("atomic_links");
  const fs::path target = dir.path / "fig.png", victim = dir.path / "victim";
  { std::ofstream(victim) << "the victim"; }
  // Every name an attacker could plant ahead: the old fixed name and a private folder of the writer's pattern.
  for (const std::string name : {"fig.png.partial", ".fig.png.tmp", ".fig.png.kvscope-000000.tmp"})
    fs::create_symlink(victim, dir.path / name);
  {
    AtomicFile file(target, Existing::Refuse, "figure");
    const fs::path temp = file.temp_path();
    CHECK(temp.filename() == "fig.png");
    CHECK(temp.parent_path().parent_path() == dir.path);
    CHECK(temp.parent_path().filename().string().rfind(".fig.png.kvscope-", 0) == 0);
    struct stat st {};
    REQUIRE(::lstat(temp.parent_path().c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 0777) == 0700);  // nobody else can put anything in it
    REQUIRE(::lstat(temp.c_str(), &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK_FALSE(fs::exists(target));  // nothing at the target until commit
    file.write("new bytes");
    file.commit();
  }
  CHECK(read(target) == "new bytes");
  CHECK_FALSE(fs::is_symlink(target));
  CHECK(read(victim) == "the victim");
  CHECK(dir.names() == std::vector<std::string>{".fig.png.kvscope-000000.tmp", ".fig.png.tmp", "fig.png",
                                                "fig.png.partial", "victim"});
}

TEST_CASE("an existing target is refused without Replace, atomically, and replaced with it", "[common][atomic]") {
  Folder dir("atomic_existing");
  const fs::path target = dir.path / "out.jsonl";
  { std::ofstream(target) << "previous"; }
  CHECK_THROWS_WITH(
      write_file_atomically(target, "new", "--predictions", Existing::Refuse),
      Catch::Contains("--predictions '" + target.string() + "' already exists") && Catch::Contains("pass --force"));
  CHECK_THROWS_WITH(check_output_path(target, Existing::Refuse, "--predictions"), Catch::Contains("already exists"));
  CHECK_NOTHROW(check_output_path(target, Existing::Replace, "--predictions"));
  CHECK(read(target) == "previous");
  // A file that appears while the writer runs (another process): commit refuses it rather than replace it.
  fs::remove(target);
  {
    AtomicFile file(target, Existing::Refuse, "--predictions");
    file.write("mine");
    { std::ofstream(target) << "theirs"; }
    CHECK_THROWS_WITH(file.commit(), Catch::Contains("already exists"));
  }
  CHECK(read(target) == "theirs");
  CHECK(dir.names() == std::vector<std::string>{"out.jsonl"});
  write_file_atomically(target, "forced", "--predictions", Existing::Replace);
  CHECK(read(target) == "forced");
  CHECK(dir.names() == std::vector<std::string>{"out.jsonl"});
}

TEST_CASE("a link at the target is an existing file; Replace replaces the link, not what it points to",
          "[common][atomic]") {
  Folder dir("atomic_target_link");
  const fs::path target = dir.path / "fig.svg", victim = dir.path / "victim";
  { std::ofstream(victim) << "the victim"; }
  fs::create_symlink(victim, target);
  CHECK_THROWS_WITH(write_file_atomically(target, "svg", "SVG", Existing::Refuse), Catch::Contains("already exists"));
  fs::remove(target);
  fs::create_symlink(dir.path / "dangling", target);  // a dangling link exists too
  CHECK_THROWS_WITH(write_file_atomically(target, "svg", "SVG", Existing::Refuse), Catch::Contains("already exists"));
  CHECK_FALSE(fs::exists(dir.path / "dangling"));
  fs::remove(target);
  fs::create_symlink(victim, target);
  write_file_atomically(target, "svg", "SVG", Existing::Replace);
  CHECK_FALSE(fs::is_symlink(target));
  CHECK(read(target) == "svg");
  CHECK(read(victim) == "the victim");
}

TEST_CASE("an abandoned or failed writer leaves the old target and no temporary file", "[common][atomic]") {
  Folder dir("atomic_abandon");
  const fs::path target = dir.path / "trace.h5";
  { std::ofstream(target) << "previous"; }
  {
    AtomicFile file(target, Existing::Replace, "trace file");
    file.write("half of it");
  }  // an exception unwinding past it
  CHECK(read(target) == "previous");
  CHECK(dir.names() == std::vector<std::string>{"trace.h5"});
  // A temporary file replaced behind the writer's back (by a library writing by name) is never put in place.
  {
    AtomicFile file(target, Existing::Replace, "trace file");
    fs::remove(file.temp_path());
    { std::ofstream(file.temp_path()) << "someone else's"; }
    CHECK_THROWS_WITH(file.commit(), Catch::Contains("was replaced"));
  }
  CHECK(read(target) == "previous");
  CHECK(dir.names() == std::vector<std::string>{"trace.h5"});
}

TEST_CASE("abandon_unfinished_files removes every writer's temporary folder, committed ones untouched",
          "[common][atomic]") {
  // What the exit handler of a plugin's exit() does: no destructor runs after it.
  Folder dir("atomic_unfinished");
  const fs::path old_trace = dir.path / "trace.h5", figure = dir.path / "figure.png";
  { std::ofstream(old_trace) << "previous"; }
  write_file_atomically(figure, "done", "PNG");
  AtomicFile first(old_trace, Existing::Replace, "trace file");
  AtomicFile second(dir.path / "samples.jsonl", Existing::Refuse, "samples");
  first.write("half");
  CHECK(dir.names().size() == 4);  // the two files and the two private folders
  abandon_unfinished_files();
  CHECK(dir.names() == std::vector<std::string>{"figure.png", "trace.h5"});
  CHECK(read(old_trace) == "previous");
  CHECK(read(figure) == "done");
}

TEST_CASE("two writers of one target at once never share a temporary file", "[common][atomic]") {
  Folder dir("atomic_concurrent");
  const fs::path target = dir.path / "same.h5";
  AtomicFile a(target, Existing::Replace, "trace file"), b(target, Existing::Replace, "trace file");
  CHECK(a.temp_path() != b.temp_path());
  a.write(std::string(4096, 'a'));
  b.write(std::string(4096, 'b'));
  a.commit();
  CHECK(read(target) == std::string(4096, 'a'));
  b.commit();
  CHECK(read(target) == std::string(4096, 'b'));
  CHECK(dir.names() == std::vector<std::string>{"same.h5"});
}

TEST_CASE("the new file's mode is 0666 less the umask", "[common][atomic]") {
  Folder dir("atomic_mode");
  const mode_t old = ::umask(022);
  write_file_atomically(dir.path / "a", "x", "file", Existing::Refuse);
  ::umask(077);
  write_file_atomically(dir.path / "b", "x", "file", Existing::Refuse);
  ::umask(old);
  CHECK((fs::status(dir.path / "a").permissions() & fs::perms::all) == static_cast<fs::perms>(0644));
  CHECK((fs::status(dir.path / "b").permissions() & fs::perms::all) == static_cast<fs::perms>(0600));
}

TEST_CASE("an output that is one of the inputs is refused, naming both options", "[common][atomic]") {
  Folder dir("atomic_inputs");
  const fs::path data = dir.path / "data.jsonl";
  { std::ofstream(data) << "records"; }
  auto refusal = [&](const fs::path& out) {
    try {
      refuse_output_that_is_input({"--predictions", out}, {{"--prompts", ""}, {"--data", data}});
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(refusal(data), Catch::Contains("--predictions '" + data.string() + "' is the same file as --data"));
  CHECK_FALSE(refusal(dir.path / "sub" / ".." / "data.jsonl").empty());  // the same path spelled otherwise
  fs::create_symlink(data, dir.path / "link.jsonl");
  CHECK_FALSE(refusal(dir.path / "link.jsonl").empty());
  fs::create_hard_link(data, dir.path / "hard.jsonl");
  CHECK_FALSE(refusal(dir.path / "hard.jsonl").empty());
  CHECK(refusal(dir.path / "pred.jsonl").empty());
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path);
  CHECK_FALSE(refusal("data.jsonl").empty());  // relative against absolute
  fs::current_path(cwd);
  CHECK(read(data) == "records");
}
