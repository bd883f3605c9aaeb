#include "kernels/cuda/cublas_library.h"

#include <dlfcn.h>

#include <cstdlib>

#include "kernels/error.h"

namespace kvscope::kernels::cuda {
namespace {

template <typename Fn>
void resolve(void* handle, const char* name, const std::string& path, Fn& out) {
  dlerror();
  void* symbol = dlsym(handle, name);
  if (!symbol) {
    const char* why = dlerror();
    throw Error("cuBLAS library '" + path + "' has no " + name + (why ? std::string(": ") + why : std::string()));
  }
  out = reinterpret_cast<Fn>(symbol);
}

}  // namespace

CublasLibrary load_cublas(const std::string& path) {
  CublasLibrary lib;
  lib.path = path;
  // RTLD_LOCAL: its symbols stay out of the global namespace; nothing else in the process links cuBLAS.
  void* handle = dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    throw Error("cannot load cuBLAS ('" + lib.path + "'): " + (why ? why : "unknown loader error") +
                "; install the CUDA toolkit's cuBLAS or point KVSCOPE_CUBLAS_LIBRARY at it");
  }
  resolve(handle, "cublasCreate_v2", lib.path, lib.create);
  resolve(handle, "cublasDestroy_v2", lib.path, lib.destroy);
  resolve(handle, "cublasSetStream_v2", lib.path, lib.set_stream);
  resolve(handle, "cublasGemmEx", lib.path, lib.gemm_ex);
  resolve(handle, "cublasGetStatusString", lib.path, lib.status_string);
  return lib;  // the handle stays open for the life of the process
}

std::string cublas_soname() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

const CublasLibrary& cublas() {
  // A static initialised once, thread-safely; an initialiser that throws is tried again on the next call.
  static const CublasLibrary loaded = [] {
    const char* chosen = std::getenv("KVSCOPE_CUBLAS_LIBRARY");
    return load_cublas(chosen && *chosen ? chosen : cublas_soname());
  }();
  return loaded;
}

}  // namespace kvscope::kernels::cuda
