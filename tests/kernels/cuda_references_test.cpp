// The host references the GPU tests trust (kernels/cuda/*_reference.cpp) against independent CPU code: the
// CPU backend's attention and K/V storage, and core/analysis's cosine-similarity maps. Runs on every machine.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/analysis/similarity.h"
#include "kernels/backend.h"
#include "kernels/cuda/attention_reference.h"
#include "kernels/cuda/cache_ops_reference.h"
#include "kernels/cuda/similarity_reference.h"
#include "tests/support/random_values.h"

using namespace kvscope;

TEST_CASE("attention_reference agrees with the CPU backend's attention and side outputs") {
  kernels::Backend& cpu = kernels::default_cpu_backend();
  const int kv_heads = 2, heads = 4, d = 16, n_cache = 30;
  auto storage = cpu.make_kv_storage(1, kv_heads, d, kernels::CacheType::F32);
  const auto k = test::random_normal_floats(static_cast<std::size_t>(n_cache) * kv_heads * d, 1);
  const auto v = test::random_normal_floats(k.size(), 2);
  std::vector<int32_t> positions(n_cache);
  for (int i = 0; i < n_cache; ++i) positions[i] = 2 * i + 1;
  storage->append(0, k.data(), v.data(), n_cache, positions.data());
  std::vector<int32_t> keep;
  for (int i = 0; i < n_cache; ++i)
    if (i % 4 != 2) keep.push_back(i);
  storage->edit(0, 1, keep, {});  // ragged heads

  kernels::cuda::HostLayerCache host;
  host.capacity = n_cache;
  host.keys.assign(static_cast<std::size_t>(kv_heads) * n_cache * d, 0.0f);
  host.values = host.keys;
  host.positions.assign(static_cast<std::size_t>(kv_heads) * n_cache, 0);
  for (int g = 0; g < kv_heads; ++g) {
    const int m = storage->size(0, g);
    host.lengths.push_back(m);
    storage->read_rows(0, g, kernels::KVPart::Keys, 0, m, host.keys.data() + static_cast<std::size_t>(g) * n_cache * d);
    storage->read_rows(0, g, kernels::KVPart::Values, 0, m,
                       host.values.data() + static_cast<std::size_t>(g) * n_cache * d);
    const auto p = storage->positions(0, g);
    std::copy(p.begin(), p.end(), host.positions.begin() + static_cast<std::ptrdiff_t>(g) * n_cache);
  }

  const int n = 12, window = 5;
  const auto q = test::random_normal_floats(static_cast<std::size_t>(n) * heads * d, 3);
  std::vector<int32_t> qpos(n);
  for (int i = 0; i < n; ++i) qpos[i] = 2 * (n_cache - n) + 2 * i + 1;
  kernels::AttentionRequest request;
  request.window = window;
  request.column_sums = request.window_sums = request.window_rows = request.last_row = request.log_sum_exp = true;
  kernels::AttentionSideOutputs side;
  std::vector<float> out(q.size());
  cpu.attention(*storage, kernels::AttentionCall{0, heads, q.data(), n, qpos.data()}, request, nullptr, side,
                out.data());

  const auto want = kernels::cuda::attention_reference(q, qpos, host, heads, kv_heads, d,
                                                       1.0f / std::sqrt(static_cast<float>(d)), window);
  test::require_all_close(out, want.out, 1e-4);
  REQUIRE(side.window == want.window);
  for (int h = 0; h < heads; ++h) {
    const int m = host.lengths[h / (heads / kv_heads)];
    auto slice = [&](const std::vector<float>& all, int blocks) {
      std::vector<float> r;
      for (int b = 0; b < blocks; ++b) {
        const auto first = all.begin() + (static_cast<std::ptrdiff_t>(h) * blocks + b) * n_cache;
        r.insert(r.end(), first, first + m);
      }
      return r;
    };
    test::require_all_close(side.column_sums[h], slice(want.column_sums, 1), 1e-4);
    test::require_all_close(side.window_sums[h], slice(want.window_sums, 1), 1e-4);
    test::require_all_close(side.window_rows[h], slice(want.window_rows, want.window), 1e-5);
    test::require_all_close(side.last_row[h], slice(want.last_row, 1), 1e-5);
    test::require_all_close(
        side.log_sum_exp[h],
        std::vector<float>(want.log_sum_exp.begin() + h * n, want.log_sum_exp.begin() + (h + 1) * n), 1e-4);
  }
}

TEST_CASE("merge_and_compact_reference agrees with the CPU backend's K/V edit") {
  kernels::Backend& cpu = kernels::default_cpu_backend();
  const int d = 8, n = 12;
  auto storage = cpu.make_kv_storage(1, 1, d, kernels::CacheType::F32);
  const auto k = test::random_normal_floats(static_cast<std::size_t>(n) * d, 4);
  std::vector<int32_t> positions(n);
  for (int i = 0; i < n; ++i) positions[i] = i;
  storage->append(0, k.data(), k.data(), n, positions.data());
  const std::vector<int32_t> keep = {0, 3, 4, 8, 11};
  const std::vector<kernels::RowMerge> merges = {{3, {1, 2}, {0.5f, 0.25f, 0.25f}}, {8, {9}, {0.6f, 0.4f}}};
  storage->edit(0, 0, keep, merges);
  std::vector<float> got(keep.size() * d);
  storage->read_rows(0, 0, kernels::KVPart::Keys, 0, static_cast<int>(keep.size()), got.data());
  const auto want = kernels::cuda::merge_and_compact_reference(
      k, d, {{{3, 1, 2}, {0.5f, 0.25f, 0.25f}}, {{8, 9}, {0.6f, 0.4f}}}, keep);
  test::require_all_close(got, want, 1e-6);
}

TEST_CASE("append_rows_reference agrees with the CPU backend's append to heads of different lengths") {
  kernels::Backend& cpu = kernels::default_cpu_backend();
  const int heads = 2, d = 8, first = 6, more = 3;
  auto storage = cpu.make_kv_storage(1, heads, d, kernels::CacheType::F32);
  kernels::cuda::HostLayerCache host;
  host.capacity = 16;
  host.keys.assign(static_cast<std::size_t>(heads) * host.capacity * d, 0.0f);
  host.values = host.keys;
  host.positions.assign(static_cast<std::size_t>(heads) * host.capacity, -1);
  host.lengths.assign(heads, 0);
  auto append_both = [&](int n, int seed, int first_position) {
    const auto k = test::random_normal_floats(static_cast<std::size_t>(n) * heads * d, seed);
    const auto v = test::random_normal_floats(k.size(), seed + 1);
    std::vector<int32_t> positions(n);
    for (int i = 0; i < n; ++i) positions[i] = first_position + i;
    storage->append(0, k.data(), v.data(), n, positions.data());
    kernels::cuda::append_rows_reference(k, v, positions, heads, d, host);
  };
  append_both(first, 7, 0);
  // Head 1 loses entries 0, 2 and 5 in both, so the next append lands at different offsets per head.
  const std::vector<int32_t> keep = {1, 3, 4};
  storage->edit(0, 1, keep, {});
  for (auto* part : {&host.keys, &host.values}) {
    float* head = part->data() + static_cast<std::size_t>(host.capacity) * d;
    for (std::size_t j = 0; j < keep.size(); ++j) std::copy_n(head + keep[j] * d, d, head + j * d);
  }
  int32_t* head_positions = host.positions.data() + host.capacity;
  for (std::size_t j = 0; j < keep.size(); ++j) head_positions[j] = head_positions[keep[j]];
  host.lengths[1] = static_cast<int32_t>(keep.size());
  append_both(more, 9, first);

  for (int g = 0; g < heads; ++g) {
    const int m = storage->size(0, g);
    REQUIRE(m == host.lengths[g]);
    const auto positions = storage->positions(0, g);
    REQUIRE(std::vector<int32_t>(positions.begin(), positions.end()) ==
            std::vector<int32_t>(host.positions.begin() + g * host.capacity, host.positions.begin() + g * host.capacity + m));
    for (const auto& [part, rows] : {std::pair{kernels::KVPart::Keys, &host.keys}, std::pair{kernels::KVPart::Values, &host.values}}) {
      std::vector<float> got(static_cast<std::size_t>(m) * d);
      storage->read_rows(0, g, part, 0, m, got.data());
      REQUIRE(got == std::vector<float>(rows->begin() + static_cast<std::ptrdiff_t>(g) * host.capacity * d,
                                        rows->begin() + (static_cast<std::ptrdiff_t>(g) * host.capacity + m) * d));
    }
  }
}

TEST_CASE("pooled_cosine_similarity_reference agrees with core/analysis's map") {
  const int n = 23, d = 12, max_size = 8;
  auto x = test::random_normal_floats(static_cast<std::size_t>(n) * d, 5);
  for (int t = 0; t < d; ++t) x[4 * d + t] = 0.0f;
  for (auto mode : {analysis::Pooling::Max, analysis::Pooling::Mean}) {
    const analysis::Map2D map = analysis::cosine_similarity_map(x.data(), n, d, max_size, mode);
    const int block = analysis::block_for(n, max_size);
    const auto want = kernels::cuda::pooled_cosine_similarity_reference(x, n, d, block, mode == analysis::Pooling::Max);
    test::require_all_close(map.values, want, 1e-5);
  }
}
