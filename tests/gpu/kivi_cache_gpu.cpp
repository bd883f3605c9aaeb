// The CUDA cache's KIVI parts (kivi2, kivi4) against their host references (kernels/cuda/cache_ops_reference.h's
// HostKiviLayer), which tests/kernels/cuda_stored_references_test.cpp ties to the CPU backend's KIVI cache byte for
// byte: the packed bytes, group sizes and residual rows after random appends, evictions and merges, the storage
// errors, the rows read back, and attention reading the groups in place. Runs only where a CUDA device exists
// (gpu_main.cpp). Written and compiled on a machine without a GPU: not yet run (docs/gpu.md).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_reference.h"
#include "kernels/cuda/cache_ops_reference.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kv_storage.h"
#include "kernels/cuda/device_buffer.h"
#include "tests/support/random_values.h"

using namespace kvscope;
using namespace kvscope::kernels::cuda;
using kernels::KVPart;

namespace {

void check_kivi_attention(const CudaKVStorage& device, const HostKiviLayer& host, int n_queries, int last_position) {
  const int heads = 6, kv_heads = host.n_kv_heads, d = host.head_dim, window = 4;
  INFO("queries " << n_queries << ", entries up to position " << last_position);
  const HostLayerCache floats = kivi_dequantized_layer(host);
  const DeviceLayerCache cache = device.layer_view(0);
  const int capacity = cache.capacity;
  // The reference's side outputs have row stride floats.capacity, the device's cache.capacity.
  HostLayerCache wide = floats;
  wide.capacity = capacity;
  for (auto* rows : {&wide.keys, &wide.values}) rows->assign(static_cast<std::size_t>(kv_heads) * capacity * d, 0.0f);
  wide.positions.assign(static_cast<std::size_t>(kv_heads) * capacity, 0);
  for (int g = 0; g < kv_heads; ++g)
    for (int j = 0; j < floats.lengths[g]; ++j) {
      wide.positions[static_cast<std::size_t>(g) * capacity + j] = floats.positions[g * floats.capacity + j];
      for (int c = 0; c < d; ++c) {
        const std::size_t from = (static_cast<std::size_t>(g) * floats.capacity + j) * d + c;
        const std::size_t to = (static_cast<std::size_t>(g) * capacity + j) * d + c;
        wide.keys[to] = floats.keys[from];
        wide.values[to] = floats.values[from];
      }
    }
  std::vector<int32_t> qpos(n_queries);
  for (int i = 0; i < n_queries; ++i) qpos[i] = last_position - n_queries + 1 + i;
  const auto q = test::random_normal_floats(static_cast<std::size_t>(n_queries) * heads * d, 3);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const HostAttentionResult want = attention_reference(q, qpos, wide, heads, kv_heads, d, scale, window);
  DeviceBuffer<float> dq, out(want.out.size()), lse(want.log_sum_exp.size()), columns(want.column_sums.size()),
      last(want.column_sums.size());
  DeviceBuffer<int32_t> dqpos;
  const int splits = attention_key_splits(n_queries, cache.max_length);
  DeviceBuffer<float> partials(static_cast<std::size_t>(splits) * heads * n_queries * (d + 2));
  dq.upload(q);
  dqpos.upload(qpos);
  for (auto* b : {&columns, &last}) check_cuda(cudaMemset(b->data(), 0, b->size() * sizeof(float)), "memset");
  check_cuda(cudaDeviceSynchronize(), "KIVI cache");
  AttentionOutputs o;
  o.out = out.data();
  o.log_sum_exp = lse.data();
  o.window = window;
  o.column_sums = columns.data();
  o.last_row = last.data();
  o.key_splits = splits;
  o.split_partials = partials.data();
  attention(dq.data(), dqpos.data(), cache, AttentionShape{n_queries, heads, kv_heads, d, scale}, o, nullptr);
  check_cuda(cudaDeviceSynchronize(), "attention");
  test::require_all_close(out.download(), want.out, 1e-4);
  test::require_all_close(lse.download(), want.log_sum_exp, 1e-4);
  test::require_all_close(columns.download(), want.column_sums, 1e-4);
  test::require_all_close(last.download(), want.last_row, 1e-5);
}

}  // namespace

TEST_CASE("CudaKVStorage's KIVI cache equals its host reference after random appends, evictions and merges", "[kivi]") {
  auto gpu = make_cuda_backend({});
  const int kv_heads = 2, d = 64;
  for (const char* spec : {"kivi2:group=16,residual=24", "kivi4:group=32,residual=0", "kivi2:group=8,residual=5"}) {
    INFO("cache type " << spec);
    const kernels::KVCacheTypes types = kernels::parse_cache_types(spec);
    auto storage = gpu->make_kv_storage(1, kv_heads, d, types);
    const auto& device = dynamic_cast<const CudaKVStorage&>(*storage);
    HostKiviLayer host(types, kv_heads, d);
    std::mt19937 rng(11);
    kernels::StorageError merge_errors[2];
    std::vector<double> append_sums(4, 0.0);
    int position = 0;
    for (int round = 0; round < 9; ++round) {
      INFO("round " << round);
      const int n = round == 0 ? 45 : 1 + static_cast<int>(rng() % 13);
      const auto k = test::random_normal_floats(static_cast<std::size_t>(n) * kv_heads * d, 100 + round, 2.0f);
      const auto v = test::random_normal_floats(k.size(), 200 + round);
      std::vector<int32_t> positions(n);
      for (int i = 0; i < n; ++i) positions[i] = position++;
      DeviceBuffer<float> dk, dv;
      dk.upload(k);
      dv.upload(v);
      check_cuda(cudaDeviceSynchronize(), "upload");
      storage->append(0, dk.data(), dv.data(), n, positions.data());
      const auto sums = kivi_append_reference(host, k, v, positions);
      for (int i = 0; i < 4; ++i) append_sums[i] += sums[i];
      if (round % 3 != 2)
        for (int g = 0; g < kv_heads; ++g) {
          const int m = storage->size(0, g);
          std::vector<int32_t> keep, evicted;
          for (int i = 0; i < m; ++i) (rng() % 4 == 0 ? evicted : keep).push_back(i);
          std::vector<kernels::RowMerge> merges;
          std::vector<kernels::ValueMerge> value_merges;
          if (round % 3 == 1 && keep.size() >= 3 && evicted.size() >= 3) {
            merges.push_back({keep[0], {evicted[0]}, {0.7f, 0.3f}});
            value_merges.push_back({evicted[1], {keep[1], keep[2]}, 0.2f});
          }
          storage->edit(0, g, keep, merges, value_merges);
          kivi_edit_reference(host, g, keep, merges, value_merges, merge_errors);
        }
      for (int g = 0; g < kv_heads; ++g)
        for (KVPart part : {KVPart::Keys, KVPart::Values}) {
          INFO("KV head " << g << (part == KVPart::Keys ? " keys" : " values"));
          const KiviHostPart got = device.kivi_part(0, g, part);
          const KiviHostPart& want = host.part(part, g);
          REQUIRE(got.state.group_sizes == want.state.group_sizes);
          REQUIRE(got.state.quantized == want.state.quantized);
          REQUIRE(got.packed == want.packed);  // the same functions quantize: byte for byte
          REQUIRE(got.residual == want.residual);
          REQUIRE(storage->entry_bytes(0, g) ==
                  host.part(KVPart::Keys, g).state.entry_bytes() + host.part(KVPart::Values, g).state.entry_bytes());
          const int m = storage->size(0, g);
          std::vector<float> rows(static_cast<std::size_t>(m) * d), expected(rows.size());
          storage->read_rows(0, g, part, 0, m, rows.data());
          kivi_load_rows(want.state, want.packed.data(), want.residual.data(), 0, m, expected.data());
          REQUIRE(rows == expected);
        }
    }
    for (KVPart part : {KVPart::Keys, KVPart::Values}) {
      const int p = part == KVPart::Values;
      const kernels::StorageError appended = storage->storage_error(0, part, false);
      CHECK(appended.error == Approx(append_sums[2 * p]).epsilon(1e-6).margin(1e-12));
      CHECK(appended.reference == Approx(append_sums[2 * p + 1]).epsilon(1e-6).margin(1e-12));
      const kernels::StorageError merged = storage->storage_error(0, part, true);
      CHECK(merged.error == Approx(merge_errors[p].error).epsilon(1e-9).margin(1e-12));
    }
    check_kivi_attention(device, host, 9, position - 1);
    check_kivi_attention(device, host, 1, position - 1);
  }
}

TEST_CASE("the CUDA backend's KIVI attention splits long caches over key slices as its reference reads them",
          "[kivi]") {
  auto gpu = make_cuda_backend({});
  const kernels::KVCacheTypes types = kernels::parse_cache_types("kivi2");
  auto storage = gpu->make_kv_storage(1, 2, 64, types);
  const auto& device = dynamic_cast<const CudaKVStorage&>(*storage);
  HostKiviLayer host(types, 2, 64);
  const int n = 1500;
  const auto k = test::random_normal_floats(static_cast<std::size_t>(n) * 2 * 64, 5, 2.0f);
  const auto v = test::random_normal_floats(k.size(), 6);
  std::vector<int32_t> positions(n);
  for (int i = 0; i < n; ++i) positions[i] = i;
  DeviceBuffer<float> dk, dv;
  dk.upload(k);
  dv.upload(v);
  check_cuda(cudaDeviceSynchronize(), "upload");
  storage->append(0, dk.data(), dv.data(), n, positions.data());
  kivi_append_reference(host, k, v, positions);
  check_kivi_attention(device, host, 1, n - 1);
}

TEST_CASE("the CUDA backend refuses KIVI mixed with another type and a block format that does not divide head_dim",
          "[kivi]") {
  auto gpu = make_cuda_backend({});
  REQUIRE_THROWS_WITH(gpu->make_kv_storage(1, 2, 64, kernels::parse_cache_types({}, "kivi2", "f16")),
                      Catch::Contains("mixes KIVI with another type"));
  REQUIRE_THROWS_WITH(gpu->make_kv_storage(1, 2, 48, kernels::CacheType::Q4_0),
                      Catch::Contains("not a multiple of 32"));
}
