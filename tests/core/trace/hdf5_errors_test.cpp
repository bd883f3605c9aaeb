// Bad input never crashes and never passes silently: unwritable paths, existing files, files that are not
// traces, truncated files and writers killed mid-run.
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <omp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/common/atomic_file.h"
#include "core/common/error.h"
#include "core/trace/hdf5_reader.h"
#include "core/trace/hdf5_util.h"
#include "core/trace/hdf5_writer.h"
#include "core/trace/trace_probe.h"
#include "fake_run.h"
#include "tests/support/temp_file.h"

using namespace kvscope;
using namespace kvscope::trace;
namespace fs = std::filesystem;

namespace {

using test::temp_file;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

fs::path write_valid_trace(const std::string& name) {
  const fs::path path = temp_file(name);
  Hdf5Writer writer(path);
  test::FakeRun fake;
  RecordOptions options;
  Recorder rec(options, {&writer}, fake.recorded_run("fake"));
  fake.run_all(rec);
  writer.close();
  return path;
}

}  // namespace

TEST_CASE("writer refuses an existing file unless forced", "[trace][errors]") {
  const fs::path path = temp_file("exists");
  { std::ofstream(path) << "keep me"; }
  const std::string e = error_of([&] { Hdf5Writer w(path); });
  CHECK(contains(e, path.string()));
  CHECK(contains(e, "already exists"));
  CHECK(fs::file_size(path) == 7);  // untouched
  WriterOptions force;
  force.force = true;
  {
    Hdf5Writer w(path, force);
    CHECK(fs::file_size(path) == 7);  // the old file stays until the new one is complete
    w.close();
  }
  CHECK(read_trace(path).runs.empty());
  CHECK(leftover_temporary_folders(path).empty());
  fs::remove(path);
}

TEST_CASE("a writer that fails or is abandoned leaves the previous file untouched and no temporary file", "[trace][errors]") {
  const fs::path path = temp_file("abandoned");
  { std::ofstream(path) << "the previous trace"; }
  WriterOptions force;
  force.force = true;
  {
    // A run that fails half-way (an exception unwinds past the writer without close()).
    Hdf5Writer writer(path, force);
    test::FakeRun fake;
    RecordOptions options;
    Recorder rec(options, {&writer}, fake.recorded_run("half"));
    fake.prefill_step(rec);
    writer.sync();
    CHECK(fs::exists(writer.temp_path()));
    CHECK(leftover_temporary_folders(path).size() == 1);
  }
  CHECK(fs::file_size(path) == 18);
  CHECK(leftover_temporary_folders(path).empty());
  // Without a previous file, an abandoned one leaves no file at all.
  fs::remove(path);
  { Hdf5Writer writer(path); }
  CHECK_FALSE(fs::exists(path));
  CHECK(leftover_temporary_folders(path).empty());
}

TEST_CASE("writer names the path it cannot create", "[trace][errors]") {
  const std::string missing_dir = (fs::temp_directory_path() / "kvscope_no_such_dir" / "x.h5").string();
  std::string e = error_of([&] { Hdf5Writer w(missing_dir); });
  CHECK(contains(e, missing_dir));
  CHECK(contains(e, "does not exist"));
  // /proc accepts no new files, even for root.
  e = error_of([&] { Hdf5Writer w("/proc/kvscope_trace_test.h5"); });
  CHECK(contains(e, "/proc/kvscope_trace_test.h5"));
  CHECK(contains(e, "cannot write trace file"));
  e = error_of([&] { Hdf5Writer w(fs::temp_directory_path()); });
  CHECK(contains(e, "is a folder"));
}

TEST_CASE("reader rejects files that are not HDF5", "[trace][errors]") {
  const fs::path path = temp_file("random");
  std::mt19937 rng(9);
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>(rng() & 0xff));
  }
  std::string e = error_of([&] { read_trace(path); });
  CHECK(contains(e, path.string()));
  CHECK(contains(e, "not an HDF5 file"));
  { std::ofstream out(path, std::ios::trunc); }
  e = error_of([&] { read_trace(path); });
  CHECK(contains(e, "empty"));
  fs::remove(path);
  e = error_of([&] { read_trace(path); });
  CHECK(contains(e, "does not exist"));
}

TEST_CASE("reader rejects HDF5 files that are not kvscope traces", "[trace][errors]") {
  const fs::path path = temp_file("foreign");
  {
    hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    H5Fclose(f);
  }
  std::string e = error_of([&] { read_trace(path); });
  CHECK(contains(e, path.string()));
  CHECK(contains(e, "not a kvscope trace"));
  CHECK(contains(e, "'format'"));
  {
    // Our format attribute but no /runs.
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "format", type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* v = "kvscope-trace";
    H5Awrite(a, type, &v);
    H5Aclose(a);
    long long version = 1;
    a = H5Acreate2(f, "format_version", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, &version);
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(f);
  }
  e = error_of([&] { read_trace(path); });
  INFO(e);  // the attributes above are ASCII strings, as many tools write them: they must read too
  CHECK(contains(e, "no '/runs' group"));
  {
    // A trace from a newer kvscope: /runs present, format_version beyond what this reader knows.
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "runs", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    long long version = 99;
    H5Awrite(a, H5T_NATIVE_LLONG, &version);
    H5Aclose(a);
    H5Fclose(f);
  }
  e = error_of([&] { read_trace(path); });
  CHECK(contains(e, path.string()));
  CHECK(contains(e, "format_version 99"));
  fs::remove(path);
}

TEST_CASE("truncated traces give an Error at every size, never a crash", "[trace][errors]") {
  const fs::path good = write_valid_trace("truncate_src");
  const auto size = fs::file_size(good);
  REQUIRE(size > 4096);
  const fs::path cut = temp_file("truncated");
  int errors = 0, tried = 0;
  for (std::uintmax_t n : {std::uintmax_t{1}, std::uintmax_t{7}, std::uintmax_t{100}, std::uintmax_t{512}, size / 8, size / 4,
                           size / 2, size * 3 / 4, size - 100, size - 1}) {
    fs::copy_file(good, cut, fs::copy_options::overwrite_existing);
    fs::resize_file(cut, n);
    ++tried;
    const std::string e = error_of([&] { read_trace(cut); });
    INFO("truncated to " << n << " of " << size << " bytes: " << e);
    CHECK(!e.empty());
    CHECK(contains(e, cut.string()));
    if (n > 512) CHECK((contains(e, "truncated") || contains(e, "damaged")));
    errors += !e.empty();
    CHECK(!error_of([&] { summarize_trace(cut); }).empty());
  }
  CHECK(errors == tried);
  fs::remove(cut);
  fs::remove(good);
}

TEST_CASE("a writer killed mid-run leaves its temporary file, which reads with a warning", "[trace][errors]") {
  const fs::path target = temp_file("killed");
  { std::ofstream(target) << "the previous trace"; }
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child records a prefill and two decode steps, waits until they are flushed, and dies without
    // closing anything. A forked child cannot use the parent's OpenMP thread pool (its threads do not
    // exist there), so it records single-threaded.
    omp_set_num_threads(1);
    try {
      WriterOptions force;
      force.force = true;
      Hdf5Writer writer(target, force);
      test::FakeRun fake;
      RecordOptions options;
      Recorder rec(options, {&writer}, fake.recorded_run("killed_run"));
      fake.prefill_step(rec);
      fake.decode_step(rec, 0);
      fake.decode_step(rec, 1);
      writer.sync();
      raise(SIGKILL);
    } catch (...) {
    }
    _exit(3);
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  // What kill -9 leaves: the writer's hidden folder beside the target, `.NAME.kvscope-XXXXXX.tmp/NAME`.
  const auto leftovers = leftover_temporary_folders(target);
  REQUIRE(leftovers.size() == 1);
  const fs::path path = leftovers[0] / target.filename();
  TraceView view;
  REQUIRE_NOTHROW(view = read_trace(path));
  REQUIRE(view.runs.size() == 1);
  const RunTrace& r = *view.runs[0];
  CHECK_FALSE(r.complete);
  CHECK(r.steps.size() == 3);
  CHECK(r.generated_ids.size() == 3);
  REQUIRE(!view.warnings.empty());
  CHECK(contains(view.warnings.front(), "incomplete"));
  CHECK(contains(view.warnings.front(), "killed_run"));
  REQUIRE(r.kept_mask.size() == 2);
  CHECK(r.kept_mask[0].n_steps == 3);
  CHECK(r.attention.size() == 8);
  const TraceSummary s = summarize_trace(path);
  CHECK_FALSE(s.runs.at(0).complete);
  CHECK(fs::file_size(target) == 18);  // kill -9 mid-write: the previous file is untouched
  fs::remove_all(leftovers[0]);
  fs::remove(target);
}

TEST_CASE("a writer killed at an arbitrary moment never crashes the reader", "[trace][errors]") {
  for (int delay_ms : {5, 30, 120}) {
    const fs::path target = temp_file("killed_any_" + std::to_string(delay_ms));
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      close(ready[0]);
      omp_set_num_threads(1);  // the parent's OpenMP pool does not exist in a forked child
      try {
        Hdf5Writer writer(target);
        const char go = 1;
        if (write(ready[1], &go, 1) != 1) _exit(4);
        for (int run = 0;; ++run) {
          test::FakeRun fake;
          fake.max_new = 60;
          RecordOptions options;
          Recorder rec(options, {&writer}, fake.recorded_run("run" + std::to_string(run)));
          fake.run_all(rec);
        }
      } catch (...) {
      }
      _exit(3);
    }
    close(ready[1]);
    char go = 0;
    REQUIRE(read(ready[0], &go, 1) == 1);
    close(ready[0]);
    usleep(static_cast<useconds_t>(delay_ms) * 1000);
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    CHECK_FALSE(fs::exists(target));  // never closed: never put in place
    const auto leftovers = leftover_temporary_folders(target);
    REQUIRE(leftovers.size() == 1);
    const fs::path path = leftovers[0] / target.filename();
    // Either a readable file (the last run incomplete) or an Error naming the file: both are fine, a
    // crash or another exception type is not.
    try {
      const TraceView view = read_trace(path);
      for (const auto& r : view.runs)
        if (!r->complete) CHECK(!view.warnings.empty());
    } catch (const Error& e) {
      CHECK(contains(e.what(), path.string()));
    }
    fs::remove_all(leftovers[0]);
  }
}

// The probe's verdicts, with stand-in children whose behaviour is known (a shell that crashes, hangs or
// exits oddly), and with the real child: this test binary (tests/catch_main.cpp) and kvscope itself.
TEST_CASE("probe passes a valid trace in a child process", "[trace][errors][probe]") {
  const fs::path path = write_valid_trace("probe_valid");
  CHECK_NOTHROW(probe_trace(path));
  CHECK_NOTHROW(probe_trace(path, ProbeOptions{60.0, {KVSCOPE_BINARY, kProbeArgument}}));
  fs::remove(path);
}

TEST_CASE("probe repeats the reader's clean refusal", "[trace][errors][probe]") {
  const fs::path path = temp_file("probe_not_hdf5", ".h5");
  std::ofstream(path) << "this is not an HDF5 file, only text\n";
  const std::string message = error_of([&] { probe_trace(path); });
  CHECK(contains(message, path.string()));
  CHECK(contains(message, "not an HDF5 file"));
  fs::remove(path);
}

TEST_CASE("probe turns a crashed child into an error naming the object", "[trace][errors][probe]") {
  ProbeOptions crash{60.0, {"/bin/sh", "-c", "echo 'at /runs/h2o (attributes)'; kill -SEGV $$", "sh"}};
  const std::string message = error_of([&] { probe_trace("/some/trace.h5", crash); });
  CHECK(contains(message, "trace file '/some/trace.h5' is damaged"));
  CHECK(contains(message, "signal 11"));
  CHECK(contains(message, "while reading /runs/h2o (attributes)"));
  CHECK(contains(message, "cannot be opened safely"));
}

TEST_CASE("probe kills a child past the time limit", "[trace][errors][probe]") {
  ProbeOptions hang{0.5, {"/bin/sh", "-c", "echo 'at /runs/x (link table)'; exec sleep 30", "sh"}};
  const auto t0 = std::chrono::steady_clock::now();
  const std::string message = error_of([&] { probe_trace("t.h5", hang); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds < 10.0);
  CHECK(contains(message, "did not finish within 0.5 s"));
  CHECK(contains(message, "stuck at /runs/x (link table)"));
}

TEST_CASE("probe reports a child that ends without a verdict, or cannot start", "[trace][errors][probe]") {
  // exit 1 without an "error" line: what a sanitizer does after catching a crash.
  const std::string silent = error_of([&] {
    probe_trace("t.h5", ProbeOptions{60.0, {"/bin/sh", "-c", "exit 1", "sh"}});
  });
  CHECK(contains(silent, "is damaged: the process checking it ended with exit status 1 while reading its header"));
  const std::string missing = error_of([&] { probe_trace("t.h5", ProbeOptions{60.0, {"/nonexistent/kvscope"}}); });
  CHECK(contains(missing, "cannot check trace file 't.h5': starting '/nonexistent/kvscope' failed"));
}

TEST_CASE("a string longer than its fixed-length dataset's elements is refused, not cut", "[trace][errors]") {
  const fs::path path = temp_file("fixed_strings");
  h5::Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  h5::Handle type = h5::fixed_string_type(4);
  h5::Handle d = h5::create_dataset(file, "words", {type, {2}, {}, {2}, 0, {}});
  h5::write_strings(d, {"ab", "abcd"}, 0);
  CHECK(h5::read_strings(d) == std::vector<std::string>{"ab", "abcd"});
  const std::string message = error_of([&] { h5::write_strings(d, {"abcdef"}, 1); });
  CHECK(contains(message, "string of 6 bytes does not fit the 4-byte elements of '/words'"));
  CHECK(h5::read_strings(d) == std::vector<std::string>{"ab", "abcd"});
  d.reset();
  file.reset();
  fs::remove(path);
}
