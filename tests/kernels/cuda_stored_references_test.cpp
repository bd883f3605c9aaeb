// The host references of the CUDA cache of stored rows (kernels/cuda/cache_ops_reference.h: append, edit, the
// floats attention reads) against the CPU backend's quantized cache, which tests/python/test_block_quant.py ties to
// the gguf package byte for byte: the same bytes after appends, merges, value merges and evictions, and the CPU
// backend's in-place attention over its blocks equal to attention_reference over the dequantized rows. The GPU
// tests (tests/gpu/stored_cache_gpu.cpp) compare the device kernels with these references. Runs on every machine.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_kv_storage.h"
#include "kernels/cuda/attention_reference.h"
#include "kernels/cuda/cache_ops_reference.h"
#include "tests/support/random_values.h"

using namespace kvscope;
using kernels::CacheType;
using kernels::KVPart;

namespace {

// The CPU cache's stored bytes of rows [0, m) of one head's part (f16 and bf16 as their little-endian halves).
std::vector<uint8_t> cpu_bytes(const kernels::cpu::CpuKVStorage& s, int g, KVPart part, int m) {
  const CacheType type = s.type().of(part);
  const std::size_t bytes = s.row_bytes(part) * m;
  const void* rows = type == CacheType::F32    ? static_cast<const void*>(s.f32(0, g, part))
                     : type == CacheType::F16  ? static_cast<const void*>(s.f16(0, g, part))
                     : type == CacheType::BF16 ? static_cast<const void*>(s.bf16(0, g, part))
                                               : static_cast<const void*>(s.blocks(0, g, part));
  std::vector<uint8_t> out(bytes);
  if (bytes > 0) std::memcpy(out.data(), rows, bytes);
  return out;
}

std::vector<uint8_t> reference_bytes(const kernels::cuda::HostStoredLayer& c, int g, KVPart part) {
  std::vector<uint8_t> out;
  for (int j = 0; j < c.lengths[g]; ++j) {
    const auto row = c.row(part, g, j);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// Rows with a spread of magnitudes and an outlier channel, as real keys have.
std::vector<float> rows_for(int n, int heads, int d, unsigned seed) {
  auto x = test::random_normal_floats(static_cast<std::size_t>(n) * heads * d, seed);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (i % d == 5) x[i] *= 12.0f;
    x[i] *= 0.25f + static_cast<float>(i / d % 7);
  }
  return x;
}

}  // namespace

TEST_CASE(
    "the stored-row references equal the CPU backend's quantized cache: bytes after appends and edits, and attention") {
  const std::vector<kernels::KVCacheTypes> cases = {{CacheType::F16},
                                                    {CacheType::BF16},
                                                    {CacheType::Q8_0},
                                                    {CacheType::Q4_0},
                                                    {CacheType::Q4_1},
                                                    {CacheType::Q8_0, CacheType::Q4_0},
                                                    {CacheType::F32, CacheType::Q4_1}};
  kernels::Backend& cpu = kernels::default_cpu_backend();
  const int kv_heads = 2, heads = 6, d = 64, first = 20, more = 3;
  for (const kernels::KVCacheTypes& types : cases) {
    INFO("cache type " << kernels::cache_type_name(types));
    auto storage = cpu.make_kv_storage(1, kv_heads, d, types);
    const auto& cpu_kv = dynamic_cast<const kernels::cpu::CpuKVStorage&>(*storage);
    kernels::cuda::HostStoredLayer host(kernels::row_type(types.keys), kernels::row_type(types.values), kv_heads, d,
                                        40);

    auto append_both = [&](int n, unsigned seed, int first_position) {
      const auto k = rows_for(n, kv_heads, d, seed), v = rows_for(n, kv_heads, d, seed + 1);
      std::vector<int32_t> positions(n);
      for (int i = 0; i < n; ++i) positions[i] = first_position + 2 * i;
      storage->append(0, k.data(), v.data(), n, positions.data());
      const auto sums = kernels::cuda::append_stored_rows_reference(k, v, positions, host);
      return sums;
    };
    const auto sums = append_both(first, 21, 0);
    // The storage error the reference counts is the CPU cache's (traces' storage_nmse).
    for (KVPart part : {KVPart::Keys, KVPart::Values}) {
      const kernels::StorageError e = storage->storage_error(0, part, false);
      const int p = part == KVPart::Values;
      CHECK(e.error == Approx(sums[2 * p]).epsilon(1e-9).margin(1e-12));
      CHECK(e.reference == Approx(sums[2 * p + 1]).epsilon(1e-9).margin(1e-12));
    }

    // Head 0: an eviction alone. Head 1: row merges, and value merges (CaM) of which one target is also a row
    // merge's, so the order (value merges first, each merged row stored once) shows.
    std::vector<int32_t> keep0, keep1;
    for (int i = 0; i < first; ++i) {
      if (i % 4 != 1) keep0.push_back(i);
      if (i != 3 && i != 7 && i != 12 && i != 15) keep1.push_back(i);
    }
    const std::vector<kernels::RowMerge> merges = {{2, {3}, {0.6f, 0.4f}}, {10, {7, 12}, {0.5f, 0.3f, 0.2f}}};
    const std::vector<kernels::ValueMerge> value_merges = {{15, {4, 10}, 0.25f}};
    storage->edit(0, 0, keep0, {});
    kernels::cuda::edit_stored_reference(host, 0, keep0, {}, {});
    storage->edit(0, 1, keep1, merges, value_merges);
    kernels::cuda::edit_stored_reference(host, 1, keep1, merges, value_merges);
    append_both(more, 23, 2 * first);

    for (int g = 0; g < kv_heads; ++g) {
      const int m = storage->size(0, g);
      REQUIRE(m == host.lengths[g]);
      const auto positions = storage->positions(0, g);
      REQUIRE(std::vector<int32_t>(positions.begin(), positions.end()) ==
              std::vector<int32_t>(host.positions.begin() + g * host.capacity,
                                   host.positions.begin() + g * host.capacity + m));
      for (KVPart part : {KVPart::Keys, KVPart::Values}) {
        INFO("KV head " << g << (part == KVPart::Keys ? " keys" : " values"));
        REQUIRE(cpu_bytes(cpu_kv, g, part, m) == reference_bytes(host, g, part));
      }
    }

    // Attention over the quantized cache: the CPU reads its blocks in place; the reference loops over the rows
    // dequantized by the function attention.cu calls per tile.
    const kernels::cuda::HostLayerCache floats = kernels::cuda::dequantized_layer(host);
    for (int queries : {9, 1}) {
      INFO("queries " << queries);
      const auto q = test::random_normal_floats(static_cast<std::size_t>(queries) * heads * d, 30 + queries);
      std::vector<int32_t> qpos(queries);
      for (int i = 0; i < queries; ++i) qpos[i] = 2 * first + 2 * (more - queries) + 2 * i + 1;
      kernels::AttentionRequest request;
      request.window = 4;
      request.column_sums = request.window_sums = request.last_row = request.log_sum_exp = true;
      kernels::AttentionSideOutputs side;
      std::vector<float> out(q.size());
      cpu.attention(*storage, kernels::AttentionCall{0, heads, q.data(), queries, qpos.data()}, request, nullptr, side,
                    out.data());
      const auto want = kernels::cuda::attention_reference(q, qpos, floats, heads, kv_heads, d,
                                                           1.0f / std::sqrt(static_cast<float>(d)), request.window);
      // Values up to ~80 (outlier channel x row scale): float32 sums of 64 products.
      test::require_all_close(out, want.out, 2e-3);
      for (int h = 0; h < heads; ++h) {
        const int m = floats.lengths[h / (heads / kv_heads)];
        auto head_slice = [&](const std::vector<float>& all) {
          return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(h) * floats.capacity,
                                    all.begin() + static_cast<std::ptrdiff_t>(h) * floats.capacity + m);
        };
        test::require_all_close(side.column_sums[h], head_slice(want.column_sums), 1e-4);
        test::require_all_close(side.last_row[h], head_slice(want.last_row), 1e-5);
        test::require_all_close(
            side.log_sum_exp[h],
            std::vector<float>(want.log_sum_exp.begin() + h * queries, want.log_sum_exp.begin() + (h + 1) * queries),
            1e-3);
      }
    }
  }
}

namespace {

// A random edit of a head of m entries, valid as KVCache::apply passes it on: about a quarter evicted, and with
// `merging` two row merges (a target folding in one or two evicted sources) and one value merge (CaM: an evicted
// source's value shared among two kept entries).
struct RandomEdit {
  std::vector<int32_t> keep;
  std::vector<kernels::RowMerge> merges;
  std::vector<kernels::ValueMerge> value_merges;
};

RandomEdit random_edit(int m, bool merging, std::mt19937& rng) {
  RandomEdit e;
  std::vector<int32_t> evicted;
  for (int i = 0; i < m; ++i) (rng() % 4 == 0 ? evicted : e.keep).push_back(i);
  if (!merging || e.keep.size() < 4 || evicted.size() < 4) return e;
  std::shuffle(evicted.begin(), evicted.end(), rng);
  std::vector<int32_t> targets = e.keep;
  std::shuffle(targets.begin(), targets.end(), rng);
  e.merges.push_back({targets[0], {evicted[0]}, {0.7f, 0.3f}});
  e.merges.push_back({targets[1], {evicted[1], evicted[2]}, {0.5f, 0.25f, 0.25f}});
  e.value_merges.push_back({evicted[3], {targets[1], targets[2]}, 0.2f});
  return e;
}

// The reference's part equals the CPU cache's KiviPart: the same packed bytes, group sizes, residual rows and
// split between quantized and float32 entries.
bool same_part(const kernels::cuda::KiviHostPart& ref, const kernels::cpu::KiviPart& cpu) {
  return ref.packed == cpu.packed() && ref.state.group_sizes == cpu.group_sizes() && ref.residual == cpu.residual() &&
         ref.state.quantized == cpu.quantized() && ref.state.packed_bytes == ref.packed.size();
}

}  // namespace

TEST_CASE(
    "the KIVI references of the CUDA cache equal the CPU backend's KIVI cache after random appends, "
    "evictions and merges (bytes, counted bytes, storage errors, attention)") {
  // Small groups and residuals so that a few dozen tokens cross every rule: key groups filling, residual rows
  // leaving, groups partly evicted and re-packed, merged entries in groups, value rows and the residual.
  const std::vector<std::string> specs = {"kivi2:group=16,residual=24", "kivi4:group=32,residual=0",
                                          "kivi2:group=8,residual=5"};
  std::vector<kernels::KVCacheTypes> cases;
  for (const std::string& spec : specs) cases.push_back(kernels::parse_cache_types(spec));
  cases.push_back(kernels::parse_cache_types({}, "kivi4:group=16,residual=12", "kivi2"));
  kernels::Backend& cpu = kernels::default_cpu_backend();
  const int kv_heads = 2, heads = 4, d = 64;
  for (const kernels::KVCacheTypes& types : cases) {
    INFO("cache type " << kernels::cache_type_name(types));
    auto storage = cpu.make_kv_storage(1, kv_heads, d, types);
    const auto& cpu_kv = dynamic_cast<const kernels::cpu::CpuKVStorage&>(*storage);
    kernels::cuda::HostKiviLayer host(types, kv_heads, d);
    // The same operations on a reference given a residual one group longer: it must part from the CPU cache.
    kernels::KVCacheTypes wrong_types = types;
    wrong_types.kivi.residual += types.kivi.group;
    kernels::cuda::HostKiviLayer wrong(wrong_types, kv_heads, d);
    std::mt19937 rng(7);
    kernels::StorageError merge_errors[2], wrong_errors[2];
    std::vector<double> append_sums(4, 0.0);
    int position = 0;
    bool merged_once = false, evicted_once = false;
    for (int round = 0; round < 9; ++round) {
      INFO("round " << round);
      const int n = round == 0 ? 45 : 1 + static_cast<int>(rng() % 13);
      const auto k = rows_for(n, kv_heads, d, 100 + round), v = rows_for(n, kv_heads, d, 200 + round);
      std::vector<int32_t> positions(n);
      for (int i = 0; i < n; ++i) positions[i] = position++;
      storage->append(0, k.data(), v.data(), n, positions.data());
      const auto sums = kernels::cuda::kivi_append_reference(host, k, v, positions);
      for (int i = 0; i < 4; ++i) append_sums[i] += sums[i];
      kernels::cuda::kivi_append_reference(wrong, k, v, positions);
      if (round % 3 != 2) {
        for (int g = 0; g < kv_heads; ++g) {
          const RandomEdit e = random_edit(storage->size(0, g), round % 3 == 1, rng);
          merged_once |= !e.merges.empty();
          evicted_once |= e.merges.empty() && static_cast<int>(e.keep.size()) < storage->size(0, g);
          storage->edit(0, g, e.keep, e.merges, e.value_merges);
          kernels::cuda::kivi_edit_reference(host, g, e.keep, e.merges, e.value_merges, merge_errors);
          kernels::cuda::kivi_edit_reference(wrong, g, e.keep, e.merges, e.value_merges, wrong_errors);
        }
      }
      bool wrong_equal = true;
      for (int g = 0; g < kv_heads; ++g) {
        const auto positions_now = storage->positions(0, g);
        REQUIRE(std::vector<int32_t>(positions_now.begin(), positions_now.end()) == host.positions[g]);
        for (KVPart part : {KVPart::Keys, KVPart::Values}) {
          INFO("KV head " << g << (part == KVPart::Keys ? " keys" : " values"));
          REQUIRE(same_part(host.part(part, g), cpu_kv.kivi(0, g, part)));
          wrong_equal = wrong_equal && same_part(wrong.part(part, g), cpu_kv.kivi(0, g, part));
        }
        // Bytes as the CUDA cache reports them (KiviPartState) against the CPU cache's.
        CHECK(host.part(KVPart::Keys, g).state.entry_bytes() + host.part(KVPart::Values, g).state.entry_bytes() ==
              storage->entry_bytes(0, g));
        CHECK(host.part(KVPart::Keys, g).state.paged_bytes(32) + host.part(KVPart::Values, g).state.paged_bytes(32) ==
              storage->paged_bytes(0, g, 32));
      }
      CHECK_FALSE(wrong_equal);
    }
    REQUIRE(merged_once);
    REQUIRE(evicted_once);
    for (KVPart part : {KVPart::Keys, KVPart::Values}) {
      const int p = part == KVPart::Values;
      const kernels::StorageError appended = storage->storage_error(0, part, false);
      CHECK(appended.error == Approx(append_sums[2 * p]).epsilon(1e-9).margin(1e-12));
      CHECK(appended.reference == Approx(append_sums[2 * p + 1]).epsilon(1e-9).margin(1e-12));
      const kernels::StorageError merged = storage->storage_error(0, part, true);
      CHECK(merged.error == Approx(merge_errors[p].error).epsilon(1e-12));
      CHECK(merged.reference == Approx(merge_errors[p].reference).epsilon(1e-12));
    }

    // The rows read back (read_rows on the device cache) and the floats attention.cu reads equal the CPU's rows,
    // and the CPU's in-place KIVI attention equals attention_reference over them.
    const kernels::cuda::HostLayerCache floats = kernels::cuda::kivi_dequantized_layer(host);
    for (int g = 0; g < kv_heads; ++g)
      for (KVPart part : {KVPart::Keys, KVPart::Values}) {
        const int m = storage->size(0, g);
        std::vector<float> rows(static_cast<std::size_t>(m) * d);
        storage->read_rows(0, g, part, 0, m, rows.data());
        const auto& all = part == KVPart::Keys ? floats.keys : floats.values;
        const auto begin = all.begin() + static_cast<std::ptrdiff_t>(g) * floats.capacity * d;
        REQUIRE(rows == std::vector<float>(begin, begin + static_cast<std::ptrdiff_t>(m) * d));
      }
    for (int queries : {7, 1}) {
      INFO("queries " << queries);
      const auto q = test::random_normal_floats(static_cast<std::size_t>(queries) * heads * d, 60 + queries);
      std::vector<int32_t> qpos(queries);
      for (int i = 0; i < queries; ++i) qpos[i] = position - queries + i;
      kernels::AttentionRequest request;
      request.window = 4;
      request.column_sums = request.last_row = request.log_sum_exp = true;
      kernels::AttentionSideOutputs side;
      std::vector<float> out(q.size());
      cpu.attention(*storage, kernels::AttentionCall{0, heads, q.data(), queries, qpos.data()}, request, nullptr, side,
                    out.data());
      const auto want = kernels::cuda::attention_reference(q, qpos, floats, heads, kv_heads, d,
                                                           1.0f / std::sqrt(static_cast<float>(d)), request.window);
      test::require_all_close(out, want.out, 2e-3);
      for (int h = 0; h < heads; ++h) {
        const int m = floats.lengths[h / (heads / kv_heads)];
        test::require_all_close(
            side.column_sums[h],
            std::vector<float>(want.column_sums.begin() + static_cast<std::ptrdiff_t>(h) * floats.capacity,
                               want.column_sums.begin() + static_cast<std::ptrdiff_t>(h) * floats.capacity + m),
            1e-4);
      }
    }
  }
}

TEST_CASE("a stored row's bytes are the layout the CUDA cache allocates and the CPU cache counts") {
  for (CacheType type :
       {CacheType::F32, CacheType::F16, CacheType::BF16, CacheType::Q8_0, CacheType::Q4_0, CacheType::Q4_1}) {
    INFO(kernels::cache_type_name(type));
    for (int d : {32, 64, 128})
      CHECK(static_cast<std::size_t>(kernels::stored_row_bytes(kernels::row_type(type), d)) ==
            kernels::cache_row_bytes(type, d));
  }
  CHECK_THROWS_WITH(kernels::row_type(CacheType::KIVI2), Catch::Contains("kivi2 has no fixed row format"));
}

TEST_CASE("a never-run device path is named before the run; the paths that ran are not") {
  using kernels::Device;
  CHECK(kernels::unverified_device_note(Device::Cuda, CacheType::Q4_0).find("has never run on") != std::string::npos);
  CHECK(kernels::unverified_device_note(Device::Cuda, {CacheType::F32, CacheType::Q8_0}).find("k=f32,v=q8_0") !=
        std::string::npos);
  CHECK(kernels::unverified_device_note(Device::Cuda, CacheType::KIVI2).find("kivi2") != std::string::npos);
  CHECK(kernels::unverified_device_note(Device::Cuda, kernels::parse_cache_types("kivi4:group=16,residual=8"))
            .find("has never run on") != std::string::npos);
  CHECK(kernels::unverified_device_note(Device::Cuda, {CacheType::KIVI2, CacheType::F16}).empty());  // refused
  CHECK(kernels::unverified_device_note(Device::Cuda, CacheType::F32).empty());
  CHECK(kernels::unverified_device_note(Device::Cpu, CacheType::Q4_0).empty());
}
