#pragma once
// The K/V rows of the cache, owned by a backend (host memory on the CPU, device memory on CUDA), with each
// row's original position. core/cache/KVCache keeps everything else (merge counts, policy scores, validation of
// edits, byte accounting) and is what policies see. Shapes: [layers][kv_heads][entries][head_dim]; entries of a
// (layer, KV head) stay ordered by position: appends go to the end and edits keep relative order.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/common/cache_rows.h"

namespace kvscope::kernels {

enum class KVPart { Keys, Values };

// How cached keys or values are stored. Attention always accumulates in float32; a merge is computed in float32
// from the stored rows and stored back rounded (or quantized) once. The block formats are llama.cpp's
// (kernels/common/quant_blocks.h, block_quantize.h): each row of head_dim values is head_dim / 32 blocks of 32
// values with their scales inline, so a row's bytes are payload plus scales and nothing else. KIVI2 and KIVI4
// are KIVI's 2- and 4-bit asymmetric quantization (Liu et al. 2024; kernels/cpu/kivi_part.h): keys per channel
// over groups of tokens, values per token over groups of channels, the newest tokens in full precision; their
// rows have no fixed size.
enum class CacheType { F32, F16, Q8_0, Q4_0, Q4_1, BF16, KIVI2, KIVI4 };
// "f32", "f16", "q8_0", "q4_0", "q4_1", "bf16", "kivi2" or "kivi4"; throws UsageError naming the value and the
// choices.
CacheType parse_cache_type(std::string_view name);
const char* cache_type_name(CacheType type);
bool is_block_quantized(CacheType type);
bool is_kivi(CacheType type);
// 2 or 4 for the KIVI types.
int kivi_bits(CacheType type);
// The shared row format of a fixed-row type (kernels/common/cache_rows.h); throws for a KIVI type.
RowType row_type(CacheType type);
// Bytes one stored row of head_dim values takes: payload and scales. head_dim must suit the type
// (check_cache_types); a KIVI type has no fixed row size (throws).
std::size_t cache_row_bytes(CacheType type, int head_dim);

// KIVI's two knobs (`kivi2:group=32,residual=128`): G, the tokens a key group spans (one scale and zero point per
// channel) and the channels a value group spans (one per token); R, the newest tokens kept in full precision.
struct KiviOptions {
  int group = 32;
  int residual = 128;
  bool operator==(const KiviOptions&) const = default;
};

// The types of keys and values, which may differ (llama.cpp's --cache-type-k / --cache-type-v). One type
// converts to the pair that stores both parts in it.
struct KVCacheTypes {
  CacheType keys = CacheType::F32;
  CacheType values = CacheType::F32;
  KiviOptions kivi;  // for a part of a KIVI type (both parts share them)
  // `--cache-rotation hadamard` or a part's `:rot=hadamard`: the part's rows are stored Hadamard-rotated
  // (common/hadamard.h) before they are rounded or quantized, as llama.cpp stores its quantized cache; attention
  // rotates the query and rotates its output back, and every reader outside attention gets rows rotated back.
  bool rotate_keys = false;
  bool rotate_values = false;
  KVCacheTypes() = default;
  KVCacheTypes(CacheType both) : keys(both), values(both) {}  // NOLINT(google-explicit-constructor): a shorthand
  KVCacheTypes(CacheType keys_type, CacheType values_type) : keys(keys_type), values(values_type) {}
  CacheType of(KVPart part) const { return part == KVPart::Keys ? keys : values; }
  bool rotated(KVPart part) const { return part == KVPart::Keys ? rotate_keys : rotate_values; }
  bool operator==(const KVCacheTypes&) const = default;
};
// "q8_0" when both parts share a type, else "k=q8_0,v=f16"; a KIVI type with options other than the defaults
// carries them ("kivi2:group=16,residual=64"), a rotated part `rot=hadamard` ("q4_0:rot=hadamard",
// "k=q4_0:rot=hadamard,v=q4_0"). parse_cache_types reads each part's name back.
std::string cache_type_name(const KVCacheTypes& types);
// The command line's --cache-type, --cache-type-k and --cache-type-v (empty: `both`): a type name, for the
// KIVI types optional `:group=G,residual=R`, and for any type `rot=hadamard` (or `rot=none`) among the options.
// Throws UsageError naming what was wrong.
KVCacheTypes parse_cache_types(std::string_view both, std::string_view keys = {}, std::string_view values = {});
// Throws UsageError when a block format cannot store rows of head_dim values (not a multiple of 32), or KIVI's
// options do not suit head_dim.
void check_cache_types(const KVCacheTypes& types, int head_dim);
// Bytes `entries` tokens of one part of one (layer, KV head) take in a cache that kept every token it was given
// (closed form: for KIVI, the quantized groups and rows and the full-precision residual its append rule leaves).
std::size_t cache_part_bytes(const KVCacheTypes& types, KVPart part, int head_dim, std::size_t entries);

// --cache-page N: what a serving engine that allocates the cache in pages of N tokens per (layer, KV head) would
// hold, each part paged on its own. A fixed-row part takes ceil(entries / N) pages of N rows; a KIVI part keeps
// its quantized store and its float32 residual in separate pages: key pages hold N / G whole groups (a group
// that lost entries to an eviction still fills its slot), value pages N quantized rows, residual pages N float32
// rows. Throws UsageError when N < 1, or when a KIVI key part's G does not divide N.
void check_cache_page(const KVCacheTypes& types, int page_tokens);
// Bytes of `pages` pages of N tokens of `part` (rows of its type; for KIVI: quantized rows, not the residual).
std::size_t cache_page_bytes(const KVCacheTypes& types, KVPart part, int head_dim, int page_tokens);
// ceil(count / per_page), 0 for 0.
inline std::size_t pages_for(std::size_t count, std::size_t per_page) { return (count + per_page - 1) / per_page; }

// Folds `sources` into the kept entry `target`: K = w[0]*K[target] + sum_i w[1+i]*K[sources[i]], V likewise.
// Indices refer to the entries before the edit; sources are not kept. (cache::MergeGroup is this type.)
struct RowMerge {
  int32_t target = 0;
  std::vector<int32_t> sources;
  std::vector<float> weights;  // 1 + sources.size() values, finite, summing to 1
};

// Adds a share of one entry's value to other entries' values, keys untouched (CaM: keys are evicted, values
// merged): V[t] += weight * V[source] for each t in targets (distinct, none the source). Applied in list order
// before the row merges, so a later source carries what earlier ones gave it. (cache::ValueMerge is this type.)
struct ValueMerge {
  int32_t source = 0;
  std::vector<int32_t> targets;
  float weight = 0.0f;
};

// The float32 results of one head's merges, as the storages compute them: value merges in list order, then the
// row merges (keys and values), each reading the results before it, so that each merged row is stored once.
// read(part, i, out) gives entry i as stored, as float. [keys, values]: entry index to its merged row.
using MergedRows = std::map<int32_t, std::vector<float>>;
std::array<MergedRows, 2> merge_results(int head_dim, std::span<const RowMerge> merges,
                                        std::span<const ValueMerge> value_merges,
                                        const std::function<void(KVPart, int32_t, float*)>& read);

// The error a cache type made storing rows: sums over every row it quantized or rounded of ||x - x'||^2 and
// ||x||^2 (x the float32 row, x' what the cache reads back). relative_nmse() = error / reference, 0 without rows.
struct StorageError {
  double error = 0.0, reference = 0.0;
  double relative_nmse() const { return reference > 0.0 ? error / reference : 0.0; }
  void add(const float* x, const float* stored, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(x[i]) - stored[i];
      error += d * d;
      reference += static_cast<double>(x[i]) * x[i];
    }
  }
};

class KVStorage {
 public:
  KVStorage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type)
      : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), type_(type) {}
  virtual ~KVStorage() = default;
  KVStorage(const KVStorage&) = delete;
  KVStorage& operator=(const KVStorage&) = delete;

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  KVCacheTypes type() const { return type_; }
  // Bytes one stored key or value row takes (not for a KIVI part: entry_bytes).
  std::size_t row_bytes(KVPart part) const { return cache_row_bytes(type_.of(part), head_dim_); }
  // Bytes one (layer, KV head)'s entries take as stored, keys and values: payload, scales and zero points, and
  // full-precision rows, without allocation slack.
  virtual std::size_t entry_bytes(int layer, int kv_head) const {
    return static_cast<std::size_t>(size(layer, kv_head)) * (row_bytes(KVPart::Keys) + row_bytes(KVPart::Values));
  }

  // The same entries in pages of page_tokens tokens (check_cache_page): whole pages, the last one partly empty.
  virtual std::size_t paged_bytes(int layer, int kv_head, int page_tokens) const {
    const std::size_t pages = pages_for(static_cast<std::size_t>(size(layer, kv_head)), page_tokens);
    return pages * (cache_page_bytes(type_, KVPart::Keys, head_dim_, page_tokens) +
                    cache_page_bytes(type_, KVPart::Values, head_dim_, page_tokens));
  }

  virtual int size(int layer, int kv_head) const = 0;
  // Original positions of the entries, host memory (the backend keeps a host copy next to any device copy).
  virtual std::span<const int32_t> positions(int layer, int kv_head) const = 0;

  // Appends n tokens to every KV head of a layer. k, v: backend memory, float [n][n_kv_heads][head_dim] (the
  // RunState's k and v); positions: host [n], each greater than the head's last position.
  virtual void append(int layer, const float* k, const float* v, int n, const int32_t* positions) = 0;

  // Applies one (layer, KV head)'s edit: first every merge (indices of the old layout, computed in float32),
  // then compaction to the `keep` entries in their order. The caller (KVCache::apply) has validated the edit
  // as a whole: keep strictly increasing and in range, merge targets kept, sources not kept and not shared.
  virtual void edit(int layer, int kv_head, std::span<const int32_t> keep, std::span<const RowMerge> merges,
                    std::span<const ValueMerge> value_merges = {}) = 0;

  // Copies rows [first, first + count) of the keys or values to host memory as float (f16 rows widened, block
  // formats dequantized).
  virtual void read_rows(int layer, int kv_head, KVPart part, int first, int count, float* host_out) const = 0;
  // The rows themselves when they are float32 in host memory (the CPU backend with CacheType::F32), so readers
  // skip the copy; nullptr otherwise.
  virtual const float* host_f32_rows(int /*layer*/, int /*kv_head*/, KVPart /*part*/) const { return nullptr; }

  // Bytes allocated for one layer's K/V rows now (capacity, not entry count: slack is counted). A storage
  // gives memory back after an edit once more than a quarter of a head's allocation is unused, so evicting
  // really shrinks the footprint while decode appends do not reallocate every step.
  virtual std::size_t layer_bytes(int layer) const = 0;

  // Per layer, the error of storing the rows appended so far (as_merged false: each row when it was quantized
  // or rounded; a KIVI row when it left the full-precision residual) or of storing merge results again (true:
  // the float32 merged row against what the cache holds after it). All zero for a float32 part.
  virtual StorageError storage_error(int /*layer*/, KVPart /*part*/, bool /*as_merged*/) const { return {}; }

 private:
  int n_layers_, n_kv_heads_, head_dim_;
  KVCacheTypes type_;
};

}  // namespace kvscope::kernels
