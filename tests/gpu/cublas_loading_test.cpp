// cuBLAS is loaded when the CUDA backend is made, not linked: a CPU run must not pay for mapping it. Runs
// without a GPU (loading and resolving symbols needs no device), so it has no `gpu` label.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "kernels/cuda/cublas_library.h"
#include "kernels/error.h"
#include "tests/support/command_output.h"

using namespace kvscope::kernels;

namespace {

bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find(name) != std::string::npos;
}


}  // namespace

TEST_CASE("the kvscope binary does not link cuBLAS", "[cuda]") {
  const std::string libraries = kvscope::test::run_command(std::string("ldd ") + KVSCOPE_BINARY).output;
  REQUIRE(libraries.find("libc.so") != std::string::npos);  // ldd answered
  CHECK(libraries.find("libcublas") == std::string::npos);
}

TEST_CASE("cuBLAS is mapped only once asked for, and its entry points resolve", "[cuda]") {
  CHECK_FALSE(mapped("libcublas"));
  const cuda::CublasLibrary& lib = cuda::cublas();
  CHECK(lib.path == cuda::cublas_soname());
  CHECK(lib.create);
  CHECK(lib.destroy);
  CHECK(lib.set_stream);
  CHECK(lib.gemm_ex);
  REQUIRE(lib.status_string);
  CHECK(std::string(lib.status_string(CUBLAS_STATUS_NOT_INITIALIZED)) == "the library was not initialized");
  CHECK(mapped("libcublas"));
  CHECK(&cuda::cublas() == &lib);  // loaded once
}

TEST_CASE("a missing cuBLAS is an error naming the file", "[cuda]") {
  try {
    cuda::load_cublas("/nonexistent/libcublas.so.99");
    FAIL("a missing library loaded");
  } catch (const kvscope::Error& e) {
    CHECK(std::string(e.what()).find("/nonexistent/libcublas.so.99") != std::string::npos);
  }
  // A library without the entry points (the C library) names the first one missing.
  try {
    cuda::load_cublas("libc.so.6");
    FAIL("libc passed for cuBLAS");
  } catch (const kvscope::Error& e) {
    CHECK(std::string(e.what()).find("cublasCreate_v2") != std::string::npos);
  }
}
