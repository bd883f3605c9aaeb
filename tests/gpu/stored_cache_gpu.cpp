// The CUDA cache of stored rows (f16, bf16, q8_0, q4_0, q4_1, and keys and values in different types) against its
// host references (kernels/cuda/cache_ops_reference.h), which tests/kernels/cuda_stored_references_test.cpp ties
// to the CPU backend's quantized cache: the appended bytes and their storage error, attention reading the blocks in
// place, and CudaKVStorage's edit (merges, value merges, compaction). Runs only where a CUDA device exists
// (gpu_main.cpp). Written and compiled on a machine without a GPU: not yet run (docs/gpu.md).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_reference.h"
#include "kernels/cuda/cache_ops.h"
#include "kernels/cuda/cache_ops_reference.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_kv_storage.h"
#include "kernels/cuda/device_buffer.h"
#include "tests/support/random_values.h"

using namespace kvscope;
using namespace kvscope::kernels::cuda;
using kernels::CacheType;
using kernels::KVPart;
using kernels::RowType;

namespace {

struct TypePair {
  RowType keys, values;
};

const std::vector<TypePair> kTypes = {{RowType::F16, RowType::F16},   {RowType::BF16, RowType::BF16},
                                      {RowType::Q8_0, RowType::Q8_0}, {RowType::Q4_0, RowType::Q4_0},
                                      {RowType::Q4_1, RowType::Q4_1}, {RowType::Q8_0, RowType::Q4_0},
                                      {RowType::F32, RowType::Q4_1}};

CacheType cache_type_of(RowType t) {
  switch (t) {
    case RowType::F32:
      return CacheType::F32;
    case RowType::F16:
      return CacheType::F16;
    case RowType::BF16:
      return CacheType::BF16;
    case RowType::Q8_0:
      return CacheType::Q8_0;
    case RowType::Q4_0:
      return CacheType::Q4_0;
    case RowType::Q4_1:
      return CacheType::Q4_1;
  }
  return CacheType::F32;
}

const char* name_of(RowType t) { return kernels::cache_type_name(cache_type_of(t)); }

}  // namespace

TEST_CASE("append_stored_rows writes the reference's bytes and storage error to heads of different lengths") {
  for (const TypePair& types : kTypes)
    for (const int n : {7, 1}) {
      INFO("keys " << name_of(types.keys) << ", values " << name_of(types.values) << ", rows " << n);
      const int heads = 3, d = 64;
      HostStoredLayer host(types.keys, types.values, heads, d, 40);
      // Earlier rows, then ragged lengths as after an eviction.
      const auto k0 = test::random_normal_floats(static_cast<std::size_t>(31) * heads * d, 11);
      std::vector<int32_t> p0(31);
      for (int i = 0; i < 31; ++i) p0[i] = i;
      append_stored_rows_reference(k0, k0, p0, host);
      host.lengths = {5, 0, 31};
      const auto k = test::random_normal_floats(static_cast<std::size_t>(n) * heads * d, 13, 3.0f);
      const auto v = test::random_normal_floats(k.size(), 14);
      std::vector<int32_t> new_positions(n);
      for (int i = 0; i < n; ++i) new_positions[i] = 100 + 3 * i;

      DeviceBuffer<uint8_t> dkeys, dvalues;
      DeviceBuffer<float> dk, dv;
      DeviceBuffer<int32_t> dpositions, dlengths, dnew;
      DeviceBuffer<double> sums(4);
      dkeys.upload(host.keys);
      dvalues.upload(host.values);
      dpositions.upload(host.positions);
      dlengths.upload(host.lengths);
      dk.upload(k);
      dv.upload(v);
      dnew.upload(new_positions);
      check_cuda(cudaMemset(sums.data(), 0, 4 * sizeof(double)), "memset");
      DeviceStoredAppendTarget target;
      target.keys = dkeys.data(), target.values = dvalues.data(), target.positions = dpositions.data();
      target.lengths = dlengths.data(), target.capacity = host.capacity, target.n_kv_heads = heads;
      target.head_dim = d, target.key_type = types.keys, target.value_type = types.values;
      target.error_sums = sums.data();
      for (int g = 0; g < heads; ++g) target.starts[g] = host.lengths[g];
      append_stored_rows(dk.data(), dv.data(), dnew.data(), n, target, nullptr);
      const auto want_sums = append_stored_rows_reference(k, v, new_positions, host);
      REQUIRE(dkeys.download() == host.keys);  // the same quantizer: byte for byte
      REQUIRE(dvalues.download() == host.values);
      REQUIRE(dpositions.download() == host.positions);
      REQUIRE(dlengths.download() == host.lengths);
      const auto got_sums = sums.download();
      for (int i = 0; i < 4; ++i) CHECK(got_sums[i] == Approx(want_sums[i]).epsilon(1e-6).margin(1e-12));
    }
}

TEST_CASE("dequantize_stored_rows, quantize_stored_rows and gather_stored_rows equal the host row functions") {
  const int d = 64, n = 12;
  for (RowType type : {RowType::F32, RowType::F16, RowType::BF16, RowType::Q8_0, RowType::Q4_0, RowType::Q4_1}) {
    INFO(name_of(type));
    const int bytes = kernels::stored_row_bytes(type, d);
    const auto x = test::random_normal_floats(static_cast<std::size_t>(n) * d, 40, 2.0f);
    std::vector<uint8_t> rows(static_cast<std::size_t>(n) * bytes);
    for (int r = 0; r < n; ++r) kernels::quantize_cache_row(type, x.data() + r * d, d, rows.data() + r * bytes);
    const std::vector<int32_t> index = {7, 0, 11, 3};
    DeviceBuffer<uint8_t> drows, dgathered(index.size() * bytes);
    DeviceBuffer<int32_t> dindex, dslots;
    DeviceBuffer<float> dout(index.size() * d), dx;
    drows.upload(rows);
    dindex.upload(index);
    // Read back: the floats dequantize_cache_row gives, bit for bit (q4_1's d q + m is fused on the device, and on
    // the host too with -march=x86-64-v3 and GCC's default contraction, as the dequantize_rows test above relies on).
    dequantize_stored_rows(drows.data(), type, d, dindex.data(), static_cast<int>(index.size()), dout.data(), nullptr);
    std::vector<float> want(index.size() * d);
    for (std::size_t i = 0; i < index.size(); ++i)
      kernels::dequantize_cache_row(type, rows.data() + index[i] * bytes, d, want.data() + i * d);
    REQUIRE(dout.download() == want);
    // Compaction: whole rows of bytes.
    gather_stored_rows(drows.data(), dindex.data(), static_cast<int>(index.size()), bytes, dgathered.data(), nullptr);
    std::vector<uint8_t> gathered;
    for (int32_t i : index) gathered.insert(gathered.end(), rows.begin() + i * bytes, rows.begin() + (i + 1) * bytes);
    REQUIRE(dgathered.download() == gathered);
    // Stored again from float rows picked by slot: quantize_cache_row's bytes and the error it made.
    const auto y = test::random_normal_floats(static_cast<std::size_t>(3) * d, 41, 0.5f);
    const std::vector<int32_t> slots = {2, 0}, targets = {5, 9};
    DeviceBuffer<double> sums(2);
    check_cuda(cudaMemset(sums.data(), 0, 2 * sizeof(double)), "memset");
    dx.upload(y);
    dslots.upload(slots);
    DeviceBuffer<int32_t> dtargets;
    dtargets.upload(targets);
    quantize_stored_rows(dx.data(), dslots.data(), dtargets.data(), 2, type, d, drows.data(), sums.data(), nullptr);
    double error = 0.0, reference = 0.0;
    std::vector<float> back(d);
    for (int i = 0; i < 2; ++i) {
      const float* row = y.data() + slots[i] * d;
      kernels::quantize_cache_row(type, row, d, rows.data() + targets[i] * bytes);
      kernels::dequantize_cache_row(type, rows.data() + targets[i] * bytes, d, back.data());
      for (int e = 0; e < d && type != RowType::F32; ++e) {
        error += (static_cast<double>(row[e]) - back[e]) * (static_cast<double>(row[e]) - back[e]);
        reference += static_cast<double>(row[e]) * row[e];
      }
    }
    REQUIRE(drows.download() == rows);
    const auto got = sums.download();
    CHECK(got[0] == Approx(error).epsilon(1e-6).margin(1e-12));
    CHECK(got[1] == Approx(reference).epsilon(1e-6).margin(1e-12));
  }
}

namespace {

void check_stored_attention(const TypePair& types, int n, int longest, int key_splits) {
  const int heads = 6, kv_heads = 2, d = 64, capacity = longest + 16, window = 8;
  INFO("keys " << name_of(types.keys) << ", values " << name_of(types.values) << ", n = " << n << ", longest "
               << longest << ", key splits " << key_splits);
  HostStoredLayer stored(types.keys, types.values, kv_heads, d, capacity);
  const auto k = test::random_normal_floats(static_cast<std::size_t>(longest) * kv_heads * d, 1);
  const auto v = test::random_normal_floats(k.size(), 2);
  std::vector<int32_t> positions(longest);
  for (int j = 0; j < longest; ++j) positions[j] = 3 * j;
  append_stored_rows_reference(k, v, positions, stored);
  stored.lengths[1] -= 5;  // ragged heads
  std::vector<int32_t> query_positions;
  for (int i = 0; i < n; ++i) query_positions.push_back(3 * (longest - n) + 3 * i + 1);
  const auto q = test::random_normal_floats(static_cast<std::size_t>(n) * heads * d, 3);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const HostAttentionResult want =
      attention_reference(q, query_positions, dequantized_layer(stored), heads, kv_heads, d, scale, window);

  DeviceBuffer<uint8_t> keys, values;
  DeviceBuffer<float> dq, out(want.out.size()), lse(want.log_sum_exp.size());
  DeviceBuffer<float> columns(want.column_sums.size()), window_sums(want.column_sums.size()),
      last(want.column_sums.size()), window_rows(want.window_rows.size()), rows(want.rows.size()),
      partials(static_cast<std::size_t>(key_splits) * heads * n * (d + 2));
  DeviceBuffer<int32_t> dpositions, lengths, qpos;
  keys.upload(stored.keys);
  values.upload(stored.values);
  dpositions.upload(stored.positions);
  lengths.upload(stored.lengths);
  qpos.upload(query_positions);
  dq.upload(q);
  for (auto* b : {&columns, &window_sums, &last, &window_rows, &rows})
    check_cuda(cudaMemset(b->data(), 0, b->size() * sizeof(float)), "memset");
  DeviceLayerCache cache{keys.data(), values.data(), dpositions.data(), lengths.data(), capacity, longest};
  cache.key_type = types.keys;
  cache.value_type = types.values;
  AttentionOutputs o;
  o.out = out.data();
  o.log_sum_exp = lse.data();
  o.window = window;
  o.column_sums = columns.data();
  o.window_sums = window_sums.data();
  o.window_rows = window_rows.data();
  o.last_row = last.data();
  o.rows = rows.data();
  o.key_splits = key_splits;
  o.split_partials = partials.data();
  attention(dq.data(), qpos.data(), cache, AttentionShape{n, heads, kv_heads, d, scale}, o, nullptr);
  check_cuda(cudaDeviceSynchronize(), "attention");
  test::require_all_close(out.download(), want.out, 1e-4);
  test::require_all_close(lse.download(), want.log_sum_exp, 1e-4);
  test::require_all_close(columns.download(), want.column_sums, 1e-4);
  test::require_all_close(window_sums.download(), want.window_sums, 1e-4);
  test::require_all_close(window_rows.download(), want.window_rows, 1e-5);
  test::require_all_close(last.download(), want.last_row, 1e-5);
  test::require_all_close(rows.download(), want.rows, 1e-5);
}

}  // namespace

TEST_CASE(
    "attention over stored rows equals attention_reference over the dequantized rows (prefill, decode, split-K)") {
  for (const TypePair& types : kTypes) {
    check_stored_attention(types, 70, 80, 1);
    check_stored_attention(types, 1, 80, 1);
    check_stored_attention(types, 1, 1500, attention_key_splits(1, 1500));
  }
}

namespace {

// The most two stored rows of `type` may differ by when the float row they store differs by an ulp or two (a
// merge's sums, fused on the device and perhaps not on the host): one code of the block's scale.
float one_code(RowType type, const float* row, int e, const uint8_t* stored) {
  const float magnitude = std::abs(row[e]);
  switch (type) {
    case RowType::F32:
      return 1e-6f * magnitude + 1e-7f;
    case RowType::F16:
      return 1e-3f * magnitude + 1e-7f;
    case RowType::BF16:
      return 8e-3f * magnitude + 1e-7f;
    default:
      break;
  }
  const int block = e / 32;
  const int bytes = kernels::row_unit_bytes(type);
  const float scale = std::abs(kernels::blocks::load_half(stored + block * bytes));
  return 1.05f * scale + 1e-6f;
}

}  // namespace

TEST_CASE("CudaKVStorage's edit of stored rows equals edit_stored_reference; merged rows re-quantized once") {
  auto gpu = make_cuda_backend({});
  const int kv_heads = 2, d = 64, n = 20;
  for (const TypePair& types : kTypes) {
    INFO("keys " << name_of(types.keys) << ", values " << name_of(types.values));
    auto storage = gpu->make_kv_storage(1, kv_heads, d, {cache_type_of(types.keys), cache_type_of(types.values)});
    const auto& device = dynamic_cast<const CudaKVStorage&>(*storage);
    HostStoredLayer host(types.keys, types.values, kv_heads, d, 64);
    auto append_both = [&](int rows, unsigned seed, int first_position) {
      const auto k = test::random_normal_floats(static_cast<std::size_t>(rows) * kv_heads * d, seed);
      const auto v = test::random_normal_floats(k.size(), seed + 1);
      std::vector<int32_t> positions(rows);
      for (int i = 0; i < rows; ++i) positions[i] = first_position + 2 * i;
      DeviceBuffer<float> dk, dv;
      dk.upload(k);
      dv.upload(v);
      storage->append(0, dk.data(), dv.data(), rows, positions.data());
      append_stored_rows_reference(k, v, positions, host);
    };
    append_both(n, 5, 0);
    std::vector<int32_t> keep0, keep1;
    for (int i = 0; i < n; ++i) {
      if (i % 4 != 1) keep0.push_back(i);
      if (i != 3 && i != 7 && i != 12 && i != 15) keep1.push_back(i);
    }
    const std::vector<kernels::RowMerge> merges = {{2, {3}, {0.6f, 0.4f}}, {10, {7, 12}, {0.5f, 0.3f, 0.2f}}};
    const std::vector<kernels::ValueMerge> value_merges = {{15, {4, 10}, 0.25f}};
    storage->edit(0, 0, keep0, {});
    edit_stored_reference(host, 0, keep0, {}, {});
    storage->edit(0, 1, keep1, merges, value_merges);
    edit_stored_reference(host, 1, keep1, merges, value_merges);
    append_both(3, 9, 2 * n);

    const HostLayerCache floats = dequantized_layer(host);
    for (int g = 0; g < kv_heads; ++g) {
      const int m = storage->size(0, g);
      REQUIRE(m == host.lengths[g]);
      for (KVPart part : {KVPart::Keys, KVPart::Values}) {
        const RowType type = part == KVPart::Keys ? types.keys : types.values;
        const auto got = device.stored_bytes(0, g, part);
        const std::size_t row_bytes = host.row_bytes(part);
        REQUIRE(got.size() == m * row_bytes);
        for (int j = 0; j < m; ++j) {
          const auto want = host.row(part, g, j);
          if (std::equal(want.begin(), want.end(), got.begin() + j * row_bytes)) continue;
          // Only a merged row may differ, and by at most one code per value.
          INFO("KV head " << g << (part == KVPart::Keys ? " keys" : " values") << ", row " << j);
          REQUIRE(g == 1);
          const int32_t original = keep1[j];
          REQUIRE((original == 2 || original == 10 || (part == KVPart::Values && original == 4)));
          std::vector<float> a(d);
          kernels::dequantize_cache_row(type, got.data() + j * row_bytes, d, a.data());
          const float* b = (part == KVPart::Keys ? floats.keys : floats.values).data() +
                           (static_cast<std::size_t>(g) * floats.capacity + j) * d;
          for (int e = 0; e < d; ++e) REQUIRE(std::abs(a[e] - b[e]) <= one_code(type, b, e, want.data()));
        }
      }
    }
  }
}
