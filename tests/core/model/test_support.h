#pragma once
// Helpers shared by the model tests: temporary files, error capture, the real model's location, a PRNG.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/common/error.h"
#include "core/model/model.h"

namespace kvscope::test {

// A fresh folder under the temporary directory, removed with everything in it when the object goes away.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("kvscope_model_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A file in its own temporary folder, deleted when the object goes away.
class TempFile {
 public:
  TempFile(const std::string& name, const std::vector<uint8_t>& bytes) : path_(dir_.path() / name) {
    std::ofstream out(path_, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  TempDir dir_;
  std::filesystem::path path_;
};

// The message of the kvscope::Error that fn throws; fails the test when it throws nothing or something else.
template <class Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const kvscope::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected kvscope::Error, got another exception: " << e.what());
  }
  FAIL("expected kvscope::Error, nothing was thrown");
  return {};
}

// The default model as scripts/fetch_model.sh places it (independent of $KVSCOPE_MODEL on purpose: the
// tests assert this model's numbers).
inline std::filesystem::path real_model_path() {
  return std::filesystem::path(KVSCOPE_SOURCE_DIR) / ".deps" / "models" / model::kDefaultModelFile;
}

inline bool have_real_model() { return std::filesystem::is_regular_file(real_model_path()); }

// Catch2 v2 has no SKIP: warn and leave the test case.
#define KVSCOPE_REQUIRE_REAL_MODEL()                                                                      \
  do {                                                                                                    \
    if (!::kvscope::test::have_real_model()) {                                                            \
      WARN("skipped: " << ::kvscope::test::real_model_path().string() << " is absent (run scripts/fetch_model.sh)"); \
      return;                                                                                             \
    }                                                                                                     \
  } while (0)

// splitmix64: small, fast and fully determined by its seed.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return next() % n; }
  uint8_t byte() { return static_cast<uint8_t>(next()); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace kvscope::test
