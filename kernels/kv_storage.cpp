#include "kernels/kv_storage.h"

#include <algorithm>
#include <stdexcept>
#include <string>

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
    {CacheType::KIVI2, "kivi2", 0, 0},
    {CacheType::KIVI4, "kivi4", 0, 0},
};
// KIVI's code rows pack 32 channels at a time (kernels/cpu/kivi_part.h).
constexpr int kKiviChunk = 32;
// A KIVI scale or zero point is a half.
constexpr std::size_t kKiviHalf = 2;

int parse_option_value(std::string_view spec, std::string_view key, std::string_view text) {
  int value = 0;
  std::size_t used = 0;
  try {
    value = std::stoi(std::string(text), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw UsageError("cache type '" + std::string(spec) + "': " + std::string(key) + "=" + std::string(text) +
                     " is not an integer");
  return value;
}

struct PartSpec {
  CacheType type;
  bool has_options = false;  // KIVI's group= or residual=
  KiviOptions kivi;
  bool rotated = false;
};

PartSpec parse_part(std::string_view spec) {
  const std::size_t colon = spec.find(':');
  PartSpec part{parse_cache_type(spec.substr(0, colon)), false, {}, false};
  if (colon == std::string_view::npos) return part;
  std::string_view rest = spec.substr(colon + 1);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const std::size_t eq = item.find('=');
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1);
    if (eq != std::string_view::npos && key == "rot") {
      if (value != "hadamard" && value != "none")
        throw UsageError("cache type '" + std::string(spec) + "': rot=" + std::string(value) +
                         " is not a rotation (expected rot=hadamard or rot=none)");
      part.rotated = value == "hadamard";
    } else if (eq != std::string_view::npos && (key == "group" || key == "residual")) {
      if (!is_kivi(part.type))
        throw UsageError("cache type '" + std::string(spec) +
                         "': only kivi2 and kivi4 take options group= and residual= (any type takes rot=hadamard)");
      part.has_options = true;
      (key == "group" ? part.kivi.group : part.kivi.residual) = parse_option_value(spec, key, value);
    } else {
      throw UsageError("cache type '" + std::string(spec) + "': unknown option '" + std::string(item) + "' (expected " +
                       (is_kivi(part.type) ? "group=N, residual=N or rot=hadamard" : "rot=hadamard") + ")");
    }
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  return part;
}
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

bool is_kivi(CacheType type) { return type == CacheType::KIVI2 || type == CacheType::KIVI4; }

int kivi_bits(CacheType type) { return type == CacheType::KIVI2 ? 2 : type == CacheType::KIVI4 ? 4 : 0; }

RowType row_type(CacheType type) {
  switch (type) {
    case CacheType::F32: return RowType::F32;
    case CacheType::F16: return RowType::F16;
    case CacheType::BF16: return RowType::BF16;
    case CacheType::Q8_0: return RowType::Q8_0;
    case CacheType::Q4_0: return RowType::Q4_0;
    case CacheType::Q4_1: return RowType::Q4_1;
    case CacheType::KIVI2:
    case CacheType::KIVI4: break;
  }
  throw Error(std::string("cache type ") + cache_type_name(type) + " has no fixed row format");
}

std::size_t cache_row_bytes(CacheType type, int head_dim) {
  const CacheTypeInfo& t = info(type);
  if (is_kivi(type)) throw Error(std::string("cache type ") + t.name + " has no fixed row size");
  return static_cast<std::size_t>(head_dim / t.block_elements) * t.block_bytes;
}

std::string cache_type_name(const KVCacheTypes& types) {
  auto name = [&](KVPart part) {
    const CacheType type = types.of(part);
    std::string options;
    if (is_kivi(type) && types.kivi != KiviOptions{})
      options = "group=" + std::to_string(types.kivi.group) + ",residual=" + std::to_string(types.kivi.residual);
    if (types.rotated(part)) options += (options.empty() ? "" : ",") + std::string("rot=hadamard");
    return std::string(cache_type_name(type)) + (options.empty() ? "" : ":" + options);
  };
  if (types.keys == types.values && types.rotate_keys == types.rotate_values) return name(KVPart::Keys);
  return "k=" + name(KVPart::Keys) + ",v=" + name(KVPart::Values);
}

KVCacheTypes parse_cache_types(std::string_view both, std::string_view keys, std::string_view values) {
  const PartSpec common = parse_part(both.empty() ? "f32" : both);
  const PartSpec k = keys.empty() ? common : parse_part(keys);
  const PartSpec v = values.empty() ? common : parse_part(values);
  KVCacheTypes types(k.type, v.type);
  if (k.has_options && v.has_options && k.kivi != v.kivi)
    throw UsageError("keys and values must share KIVI's options (got '" + std::string(keys.empty() ? both : keys) +
                     "' and '" + std::string(values.empty() ? both : values) + "')");
  types.kivi = k.has_options ? k.kivi : v.kivi;
  types.rotate_keys = k.rotated;
  types.rotate_values = v.rotated;
  return types;
}

std::size_t cache_part_bytes(const KVCacheTypes& types, KVPart part, int head_dim, std::size_t entries) {
  const CacheType type = types.of(part);
  if (!is_kivi(type)) return entries * cache_row_bytes(type, head_dim);
  const auto d = static_cast<std::size_t>(head_dim);
  const auto g = static_cast<std::size_t>(types.kivi.group), r = static_cast<std::size_t>(types.kivi.residual);
  const std::size_t code_row = d * kivi_bits(type) / 8, full_row = d * sizeof(float);
  if (part == KVPart::Keys) {
    // Keys stay in full precision until R + G of them are, then the oldest G form a group.
    const std::size_t residual = entries < r + g ? entries : r + (entries - r) % g;
    const std::size_t groups = (entries - residual) / g;
    return groups * (2 * kKiviHalf * d + g * code_row) + residual * full_row;
  }
  const std::size_t residual = std::min(entries, r);
  return (entries - residual) * (2 * kKiviHalf * (d / g) + code_row) + residual * full_row;
}

void check_cache_page(const KVCacheTypes& types, int page_tokens) {
  if (page_tokens < 1)
    throw UsageError("--cache-page " + std::to_string(page_tokens) + ": a page holds at least one token");
  if (is_kivi(types.keys) && page_tokens % types.kivi.group != 0)
    throw UsageError("--cache-page " + std::to_string(page_tokens) + ": a " + cache_type_name(types.keys) +
                     " key page holds whole groups of " + std::to_string(types.kivi.group) +
                     " tokens; give a multiple of " + std::to_string(types.kivi.group));
}

std::size_t cache_page_bytes(const KVCacheTypes& types, KVPart part, int head_dim, int page_tokens) {
  const CacheType type = types.of(part);
  const auto n = static_cast<std::size_t>(page_tokens);
  if (!is_kivi(type)) return n * cache_row_bytes(type, head_dim);
  const auto d = static_cast<std::size_t>(head_dim), g = static_cast<std::size_t>(types.kivi.group);
  const std::size_t code_row = d * kivi_bits(type) / 8;
  if (part == KVPart::Keys) return n / g * (2 * kKiviHalf * d + g * code_row);
  return n * (2 * kKiviHalf * (d / g) + code_row);
}

void check_cache_types(const KVCacheTypes& types, int head_dim) {
  if (is_kivi(types.keys) || is_kivi(types.values)) {
    const KiviOptions& o = types.kivi;
    if (head_dim % kKiviChunk != 0)
      throw UsageError("KIVI packs codes 32 channels at a time, but this model's head_dim " +
                       std::to_string(head_dim) + " is not a multiple of 32 (use f32, f16 or bf16)");
    if (o.group < 8 || o.group % 8 != 0 || head_dim % o.group != 0)
      throw UsageError("KIVI group=" + std::to_string(o.group) +
                       ": a group must be a multiple of 8 that divides head_dim " + std::to_string(head_dim) +
                       " (a value group spans channels)");
    if (o.residual < 0)
      throw UsageError("KIVI residual=" + std::to_string(o.residual) + ": the full-precision tokens cannot be negative");
  }
  for (CacheType type : {types.keys, types.values}) {
    if (is_kivi(type)) continue;
    const int block = info(type).block_elements;
    if (head_dim % block != 0)
      throw UsageError(std::string("cache type ") + cache_type_name(type) + " stores blocks of " +
                       std::to_string(block) + " values, but this model's head_dim " + std::to_string(head_dim) +
                       " is not a multiple of " + std::to_string(block) + " (use f32, f16 or bf16)");
  }
}

std::array<MergedRows, 2> merge_results(int head_dim, std::span<const RowMerge> merges,
                                        std::span<const ValueMerge> value_merges,
                                        const std::function<void(KVPart, int32_t, float*)>& read) {
  const auto d = static_cast<std::size_t>(head_dim);
  std::array<MergedRows, 2> merged;
  auto current = [&](KVPart part, int32_t i, float* out) {
    const auto& results = merged[part == KVPart::Values];
    if (const auto it = results.find(i); it != results.end())
      std::copy(it->second.begin(), it->second.end(), out);
    else
      read(part, i, out);
  };
  std::vector<float> row(d), sum(d);
  for (const ValueMerge& m : value_merges) {
    current(KVPart::Values, m.source, row.data());
    for (int32_t t : m.targets) {
      current(KVPart::Values, t, sum.data());
      for (std::size_t j = 0; j < d; ++j) sum[j] += m.weight * row[j];
      merged[1][t] = sum;
    }
  }
  for (const RowMerge& g : merges)
    for (KVPart part : {KVPart::Keys, KVPart::Values}) {
      current(part, g.target, row.data());
      for (std::size_t j = 0; j < d; ++j) sum[j] = g.weights[0] * row[j];
      for (std::size_t s = 0; s < g.sources.size(); ++s) {
        current(part, g.sources[s], row.data());
        for (std::size_t j = 0; j < d; ++j) sum[j] += g.weights[s + 1] * row[j];
      }
      merged[part == KVPart::Values][g.target] = sum;
    }
  return merged;
}

}  // namespace kvscope::kernels
