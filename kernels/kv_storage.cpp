#include "kernels/kv_storage.h"

#include "kernels/error.h"

namespace kvscope::kernels {

CacheType parse_cache_type(std::string_view name) {
  if (name == "f32") return CacheType::F32;
  if (name == "f16") return CacheType::F16;
  throw UsageError("unknown cache type '" + std::string(name) + "' (expected f32 or f16)");
}

const char* cache_type_name(CacheType type) { return type == CacheType::F16 ? "f16" : "f32"; }

std::size_t cache_type_bytes(CacheType type) { return type == CacheType::F16 ? 2 : 4; }

}  // namespace kvscope::kernels
