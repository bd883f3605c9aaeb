// The CUDA backend against the CPU backend through kernels/backend.h: K/V storage (append, merge + compaction,
// read back, bytes and storage error) and attention with every side output on the edited cache, for f32 and the
// stored types (f16, bf16, q8_0, q4_0, q4_1, mixed; those not yet run on a GPU: docs/gpu.md). Runs only where a
// CUDA device exists.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_buffer.h"
#include "tests/support/random_values.h"

using namespace kvscope;

namespace {

class RowCollector final : public kernels::AttentionRowSink {
 public:
  explicit RowCollector(int heads) : rows(heads) {}
  void on_rows(int head, int first_row, int n_rows, int n_cols, const float* probs) override {
    auto& r = rows[head];
    for (int i = 0; i < n_rows; ++i) {
      if (static_cast<int>(r.size()) <= first_row + i) r.resize(first_row + i + 1);
      r[first_row + i].assign(probs + static_cast<std::size_t>(i) * n_cols,
                              probs + static_cast<std::size_t>(i + 1) * n_cols);
    }
  }
  std::vector<std::vector<std::vector<float>>> rows;  // [head][row][col]
};

// Keys visible to no query of a block may be cut from the CPU's rows; missing columns are zeros.
void require_rows_close(std::vector<float> got, std::vector<float> want) {
  const std::size_t n = std::max(got.size(), want.size());
  got.resize(n, 0.0f);
  want.resize(n, 0.0f);
  test::require_all_close(got, want, 1e-5);
}

}  // namespace

TEST_CASE("CUDA backend storage and attention match the CPU backend, for every fixed-row cache type") {
  using kernels::CacheType;
  kernels::Backend& cpu = kernels::default_cpu_backend();
  auto gpu = kernels::cuda::make_cuda_backend({});
  const int kv_heads = 2, heads = 6, d = 64, n = 50;
  const std::vector<kernels::KVCacheTypes> types = {CacheType::F32,  CacheType::F16,  CacheType::BF16,
                                                    CacheType::Q8_0, CacheType::Q4_0, CacheType::Q4_1,
                                                    {CacheType::Q8_0, CacheType::Q4_0}};
  for (const kernels::KVCacheTypes& type : types) {
    INFO("cache type " << kernels::cache_type_name(type));
    const bool f32 = type == kernels::KVCacheTypes{};
    auto cpu_kv = cpu.make_kv_storage(1, kv_heads, d, type);
    auto gpu_kv = gpu->make_kv_storage(1, kv_heads, d, type);

    const auto k = test::random_normal_floats(static_cast<std::size_t>(n) * kv_heads * d, 1);
    const auto v = test::random_normal_floats(k.size(), 2);
    std::vector<int32_t> positions(n);
    for (int i = 0; i < n; ++i) positions[i] = 2 * i;
    kernels::cuda::DeviceBuffer<float> dk, dv;
    dk.upload(k);
    dv.upload(v);
    cpu_kv->append(0, k.data(), v.data(), n, positions.data());
    gpu_kv->append(0, dk.data(), dv.data(), n, positions.data());

    // Head 0: keep every other entry and merge two evicted neighbours into kept ones; head 1: a plain eviction.
    std::vector<int32_t> keep0, keep1;
    for (int i = 0; i < n; i += 2) keep0.push_back(i);
    for (int i = 0; i < n; ++i)
      if (i % 5 != 1) keep1.push_back(i);
    const std::vector<kernels::RowMerge> merges0 = {{4, {5}, {0.75f, 0.25f}}, {10, {11, 13}, {0.5f, 0.25f, 0.25f}}};
    cpu_kv->edit(0, 0, keep0, merges0);
    gpu_kv->edit(0, 0, keep0, merges0);
    cpu_kv->edit(0, 1, keep1, {});
    gpu_kv->edit(0, 1, keep1, {});

    for (int g = 0; g < kv_heads; ++g) {
      REQUIRE(gpu_kv->size(0, g) == cpu_kv->size(0, g));
      const auto pc = cpu_kv->positions(0, g), pg = gpu_kv->positions(0, g);
      REQUIRE(std::vector<int32_t>(pg.begin(), pg.end()) == std::vector<int32_t>(pc.begin(), pc.end()));
      for (auto part : {kernels::KVPart::Keys, kernels::KVPart::Values}) {
        const int m = cpu_kv->size(0, g);
        std::vector<float> rc(static_cast<std::size_t>(m) * d), rg(rc.size());
        cpu_kv->read_rows(0, g, part, 0, m, rc.data());
        gpu_kv->read_rows(0, g, part, 0, m, rg.data());
        // The same quantizer on both: equal, except that a merged row (head 0's rows 2 and 5 after compaction)
        // is summed with fused multiply-adds on the device and may land one code away.
        for (int j = 0; j < m; ++j) {
          const bool merged = g == 0 && (j == 2 || j == 5);
          test::require_all_close(std::vector<float>(rg.begin() + j * d, rg.begin() + (j + 1) * d),
                                  std::vector<float>(rc.begin() + j * d, rc.begin() + (j + 1) * d),
                                  merged && !f32 ? 0.5 : 1e-6);
        }
      }
      REQUIRE(gpu_kv->entry_bytes(0, g) == cpu_kv->entry_bytes(0, g));  // payload and scales, as counted on the CPU
    }
    for (auto part : {kernels::KVPart::Keys, kernels::KVPart::Values}) {
      const kernels::StorageError ce = cpu_kv->storage_error(0, part, false);
      const kernels::StorageError ge = gpu_kv->storage_error(0, part, false);
      CHECK(ge.error == Approx(ce.error).epsilon(1e-6).margin(1e-12));
      CHECK(ge.reference == Approx(ce.reference).epsilon(1e-6).margin(1e-12));
      const kernels::StorageError cm = cpu_kv->storage_error(0, part, true), gm = gpu_kv->storage_error(0, part, true);
      CHECK(gm.reference == Approx(cm.reference).epsilon(1e-5).margin(1e-12));
    }
    const double tolerance = f32 ? 1e-4 : 1e-3;

    // A prefill-like call of 20 queries at the newest positions, then a decode call of one.
    for (int queries : {20, 1}) {
      const auto q = test::random_normal_floats(static_cast<std::size_t>(queries) * heads * d, 3 + queries);
      std::vector<int32_t> qpos(queries);
      for (int i = 0; i < queries; ++i) qpos[i] = 2 * (n - queries) + 2 * i;
      kernels::AttentionRequest request;
      request.window = 4;
      request.column_sums = request.window_sums = request.window_rows = request.last_row = request.rows = true;
      request.log_sum_exp = true;
      const kernels::AttentionCall call{0, heads, nullptr, queries, qpos.data()};

      kernels::AttentionSideOutputs cs, gs;
      RowCollector crows(heads), grows(heads);
      std::vector<float> cout(q.size()), gout(q.size());
      kernels::AttentionCall cpu_call = call;
      cpu_call.q = q.data();
      cpu.attention(*cpu_kv, cpu_call, request, &crows, cs, cout.data());

      kernels::cuda::DeviceBuffer<float> dq, dout(q.size());
      dq.upload(q);
      kernels::AttentionCall gpu_call = call;
      gpu_call.q = dq.data();
      gpu->attention(*gpu_kv, gpu_call, request, &grows, gs, dout.data());
      gpu->to_host(dout.data(), gout.data(), gout.size());

      INFO("queries = " << queries);
      test::require_all_close(gout, cout, tolerance);
      REQUIRE(gs.n_keys == cs.n_keys);
      REQUIRE(gs.window == cs.window);
      for (int h = 0; h < heads; ++h) {
        test::require_all_close(gs.column_sums[h], cs.column_sums[h], tolerance);
        test::require_all_close(gs.window_sums[h], cs.window_sums[h], tolerance);
        test::require_all_close(gs.window_rows[h], cs.window_rows[h], 1e-5);
        test::require_all_close(gs.last_row[h], cs.last_row[h], 1e-5);
        test::require_all_close(gs.log_sum_exp[h], cs.log_sum_exp[h], tolerance);
        REQUIRE(grows.rows[h].size() == crows.rows[h].size());
        for (std::size_t r = 0; r < crows.rows[h].size(); ++r) require_rows_close(grows.rows[h][r], crows.rows[h][r]);
      }
    }
  }
}
