#include "kernels/kv_storage.h"

#include "kernels/common/quant_blocks.h"
#include "kernels/error.h"

namespace kvscope::kernels {

namespace {
struct CacheTypeInfo {
  CacheType type;
  const char* name;
  int block_elements;
  int block_bytes;
};
constexpr CacheTypeInfo kCacheTypes[] = {
    {CacheType::F32, "f32", 1, 4},
    {CacheType::F16, "f16", 1, 2},
    {CacheType::Q8_0, "q8_0", blocks::kQ8_0Elements, blocks::kQ8_0Bytes},
    {CacheType::Q4_0, "q4_0", blocks::kQ4_0Elements, blocks::kQ4_0Bytes},
    {CacheType::Q4_1, "q4_1", blocks::kQ4_1Elements, blocks::kQ4_1Bytes},
    {CacheType::BF16, "bf16", 1, 2},
};
const CacheTypeInfo& info(CacheType type) { return kCacheTypes[static_cast<int>(type)]; }
}  // namespace

CacheType parse_cache_type(std::string_view name) {
  std::string choices;
  for (const CacheTypeInfo& t : kCacheTypes) {
    if (name == t.name) return t.type;
    choices += choices.empty() ? t.name : std::string(", ") + t.name;
  }
  throw UsageError("unknown cache type '" + std::string(name) + "' (expected one of " + choices + ")");
}

const char* cache_type_name(CacheType type) { return info(type).name; }

bool is_block_quantized(CacheType type) { return info(type).block_elements > 1; }

std::size_t cache_row_bytes(CacheType type, int head_dim) {
  const CacheTypeInfo& t = info(type);
  return static_cast<std::size_t>(head_dim / t.block_elements) * t.block_bytes;
}

std::string cache_type_name(const KVCacheTypes& types) {
  if (types.keys == types.values) return cache_type_name(types.keys);
  return std::string("k=") + cache_type_name(types.keys) + ",v=" + cache_type_name(types.values);
}

void check_cache_types(const KVCacheTypes& types, int head_dim) {
  for (CacheType type : {types.keys, types.values}) {
    const int block = info(type).block_elements;
    if (head_dim % block != 0)
      throw UsageError(std::string("cache type ") + cache_type_name(type) + " stores blocks of " +
                       std::to_string(block) + " values, but this model's head_dim " + std::to_string(head_dim) +
                       " is not a multiple of " + std::to_string(block) + " (use f32, f16 or bf16)");
  }
}

}  // namespace kvscope::kernels
