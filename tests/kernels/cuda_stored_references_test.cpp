// The host references of the CUDA cache of stored rows (kernels/cuda/cache_ops_reference.h: append, edit, the
// floats attention reads) against the CPU backend's quantized cache, which tests/python/test_block_quant.py ties to
// the gguf package byte for byte: the same bytes after appends, merges, value merges and evictions, and the CPU
// backend's in-place attention over its blocks equal to attention_reference over the dequantized rows. The GPU
// tests (tests/gpu/stored_cache_gpu.cpp) compare the device kernels with these references. Runs on every machine.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
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
  CHECK(kernels::unverified_device_note(Device::Cuda, CacheType::F32).empty());
  CHECK(kernels::unverified_device_note(Device::Cpu, CacheType::Q4_0).empty());
}
