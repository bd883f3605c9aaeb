// Each CUDA kernel against its host reference (kernels/cuda/*_reference.h) or the CPU backend, on random
// inputs (the llm.c dev/cuda habit). Runs only where a CUDA device exists (gpu_main.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/common/dequantize.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_reference.h"
#include "kernels/cuda/cache_ops.h"
#include "kernels/cuda/cache_ops_reference.h"
#include "kernels/cuda/dequantize.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/similarity.h"
#include "kernels/cuda/similarity_reference.h"
#include "tests/support/random_values.h"

using namespace kvscope;
using namespace kvscope::kernels::cuda;

namespace {

struct QuantCase {
  kernels::GgmlType type;
  int elements, bytes;
  std::vector<int> scale_offsets;  // where the block's f16 scales sit
};

// Random blocks whose f16 scale fields hold sane values (random bits there could be NaN or infinity).
std::vector<uint8_t> random_blocks(const QuantCase& c, int blocks, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  std::vector<uint8_t> data(static_cast<std::size_t>(blocks) * c.bytes);
  for (auto& b : data) b = static_cast<uint8_t>(byte(rng));
  for (int i = 0; i < blocks; ++i)
    for (int offset : c.scale_offsets) {
      const uint16_t h = kernels::fp32_to_fp16(scale(rng));
      data[static_cast<std::size_t>(i) * c.bytes + offset] = static_cast<uint8_t>(h & 0xFF);
      data[static_cast<std::size_t>(i) * c.bytes + offset + 1] = static_cast<uint8_t>(h >> 8);
    }
  return data;
}

}  // namespace

TEST_CASE("dequantize_rows equals the CPU dequantizer for every block type") {
  const std::vector<QuantCase> cases = {{kernels::GgmlType::Q4_0, 32, 18, {0}},
                                        {kernels::GgmlType::Q4_1, 32, 20, {0, 2}},
                                        {kernels::GgmlType::Q8_0, 32, 34, {0}},
                                        {kernels::GgmlType::Q4_K, 256, 144, {0, 2}},
                                        {kernels::GgmlType::Q6_K, 256, 210, {208}}};
  for (const QuantCase& c : cases) {
    const int rows = 3, cols = 2 * c.elements, per_row = cols / c.elements;
    const auto host = random_blocks(c, rows * per_row, 7 + static_cast<unsigned>(c.type));
    std::vector<float> want(static_cast<std::size_t>(rows) * cols);
    kernels::dequantize_row(c.type, host.data(), want.data(), static_cast<int64_t>(rows) * cols);
    DeviceBuffer<uint8_t> src;
    src.upload(host);
    DeviceBuffer<float> f32(want.size());
    dequantize_rows(c.type, src.data(), rows, cols, static_cast<int64_t>(per_row) * c.bytes, f32.data(),
                    DeviceFloat::F32, nullptr);
    REQUIRE(f32.download() == want);  // the same block functions: bit-identical
    DeviceBuffer<uint16_t> f16(want.size());
    dequantize_rows(c.type, src.data(), rows, cols, static_cast<int64_t>(per_row) * c.bytes, f16.data(),
                    DeviceFloat::F16, nullptr);
    const auto halves = f16.download();
    for (std::size_t i = 0; i < want.size(); ++i) REQUIRE(halves[i] == kernels::fp32_to_fp16(want[i]));
  }
}

namespace {

struct AttentionCase {
  int n;            // queries
  int longest;      // entries of KV head 0; head 1 holds 5 fewer (ragged heads)
  int key_splits;   // 1, or split-K slices (decode over a long cache)
};

void check_attention(const AttentionCase& c) {
  const int heads = 6, kv_heads = 2, d = 64, capacity = c.longest + 16, window = 8;
  HostLayerCache host;
  host.capacity = capacity;
  host.keys = test::random_normal_floats(static_cast<std::size_t>(kv_heads) * capacity * d, 1);
  host.values = test::random_normal_floats(host.keys.size(), 2);
  host.positions.assign(static_cast<std::size_t>(kv_heads) * capacity, 0);
  host.lengths = {c.longest, c.longest - 5};  // an evicted-looking history with gaps, then this step's keys
  for (int g = 0; g < kv_heads; ++g)
    for (int j = 0; j < capacity; ++j) host.positions[static_cast<std::size_t>(g) * capacity + j] = 3 * j + g;
  std::vector<int32_t> query_positions;
  for (int i = 0; i < c.n; ++i) query_positions.push_back(3 * (c.longest - c.n) + 3 * i + 1);
  const auto q = test::random_normal_floats(static_cast<std::size_t>(c.n) * heads * d, 3);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const HostAttentionResult want = attention_reference(q, query_positions, host, heads, kv_heads, d, scale, window);

  DeviceBuffer<float> keys, values, dq, out(want.out.size()), lse(want.log_sum_exp.size());
  DeviceBuffer<float> columns(want.column_sums.size()), window_sums(want.column_sums.size()),
      last(want.column_sums.size()), window_rows(want.window_rows.size()), rows(want.rows.size()),
      partials(static_cast<std::size_t>(c.key_splits) * heads * c.n * (d + 2));
  DeviceBuffer<int32_t> positions, lengths, qpos;
  keys.upload(host.keys);
  values.upload(host.values);
  positions.upload(host.positions);
  lengths.upload(host.lengths);
  qpos.upload(query_positions);
  dq.upload(q);
  for (auto* b : {&columns, &window_sums, &last, &window_rows, &rows})
    check_cuda(cudaMemset(b->data(), 0, b->size() * sizeof(float)), "memset");
  const DeviceLayerCache cache{keys.data(), values.data(), positions.data(), lengths.data(), capacity, c.longest};
  AttentionOutputs o;
  o.out = out.data();
  o.log_sum_exp = lse.data();
  o.window = window;
  o.column_sums = columns.data();
  o.window_sums = window_sums.data();
  o.window_rows = window_rows.data();
  o.last_row = last.data();
  o.rows = rows.data();
  o.key_splits = c.key_splits;
  o.split_partials = partials.data();
  attention(dq.data(), qpos.data(), cache, AttentionShape{c.n, heads, kv_heads, d, scale}, o, nullptr);
  check_cuda(cudaDeviceSynchronize(), "attention");
  INFO("n = " << c.n << ", longest head " << c.longest << ", key splits " << c.key_splits);
  test::require_all_close(out.download(), want.out, 1e-4);
  test::require_all_close(lse.download(), want.log_sum_exp, 1e-4);
  test::require_all_close(columns.download(), want.column_sums, 1e-4);
  test::require_all_close(window_sums.download(), want.window_sums, 1e-4);
  test::require_all_close(window_rows.download(), want.window_rows, 1e-5);
  test::require_all_close(last.download(), want.last_row, 1e-5);
  test::require_all_close(rows.download(), want.rows, 1e-5);
}

}  // namespace

TEST_CASE("attention with side outputs matches the direct O(n^2) reference (prefill and decode, GQA)") {
  check_attention({70, 80, 1});
  check_attention({1, 80, 1});
}

TEST_CASE("split-K decode attention over a long cache matches the reference") {
  REQUIRE(attention_key_splits(1, 1500) > 1);
  REQUIRE(attention_key_splits(70, 1500) == 1);  // prefill-sized calls have blocks enough
  check_attention({1, 1500, attention_key_splits(1, 1500)});
  check_attention({3, 1500, 7});   // several rows, and slices that leave the shorter head's last one empty-ish
  check_attention({1, 100, 64});   // more slices than key tiles: most slices see no key
}

TEST_CASE("merge_rows then gather_rows equals the reference edit") {
  const int n = 40, d = 64;
  const auto host = test::random_normal_floats(static_cast<std::size_t>(n) * d, 4);
  const std::vector<HostMergeGroup> groups = {{{5, 6, 7}, {0.5f, 0.3f, 0.2f}}, {{20, 2}, {0.9f, 0.1f}}};
  std::vector<int32_t> keep;
  for (int i = 0; i < n; ++i)
    if (i % 3 != 0 && i != 6 && i != 7 && i != 2) keep.push_back(i);
  const auto want = merge_and_compact_reference(host, d, groups, keep);

  std::vector<int32_t> offsets{0}, members;
  std::vector<float> weights;
  for (const auto& g : groups) {
    members.insert(members.end(), g.members.begin(), g.members.end());
    weights.insert(weights.end(), g.weights.begin(), g.weights.end());
    offsets.push_back(static_cast<int32_t>(members.size()));
  }
  DeviceBuffer<float> rows, dweights, compact(want.size());
  DeviceBuffer<int32_t> doffsets, dmembers, dkeep;
  rows.upload(host);
  dweights.upload(weights);
  doffsets.upload(offsets);
  dmembers.upload(members);
  dkeep.upload(keep);
  merge_rows(rows.data(), d, DeviceMergeGroups{doffsets.data(), dmembers.data(), dweights.data(), 2}, nullptr);
  gather_rows(rows.data(), dkeep.data(), static_cast<int>(keep.size()), d, compact.data(), nullptr);
  test::require_all_close(compact.download(), want, 1e-6);
}

TEST_CASE("append_rows places every head's new rows after its own length, as the reference does") {
  // Heads of different lengths (as after an eviction), a prefill block and a decode row.
  for (const int n : {7, 1}) {
    const int heads = 3, d = 64;
    HostLayerCache host;
    host.capacity = 40;
    const std::size_t rows = static_cast<std::size_t>(heads) * host.capacity;
    host.keys = test::random_normal_floats(rows * d, 11);
    host.values = test::random_normal_floats(rows * d, 12);
    host.positions.assign(rows, -1);
    host.lengths = {5, 0, 31};
    const auto k = test::random_normal_floats(static_cast<std::size_t>(n) * heads * d, 13);
    const auto v = test::random_normal_floats(k.size(), 14);
    std::vector<int32_t> new_positions(n);
    for (int i = 0; i < n; ++i) new_positions[i] = 100 + 3 * i;

    DeviceBuffer<float> dkeys, dvalues, dk, dv;
    DeviceBuffer<int32_t> dpositions, dlengths, dnew;
    dkeys.upload(host.keys);
    dvalues.upload(host.values);
    dpositions.upload(host.positions);
    dlengths.upload(host.lengths);
    dk.upload(k);
    dv.upload(v);
    dnew.upload(new_positions);
    DeviceAppendTarget target;
    target.keys = dkeys.data(), target.values = dvalues.data(), target.positions = dpositions.data();
    target.lengths = dlengths.data(), target.capacity = host.capacity, target.n_kv_heads = heads, target.head_dim = d;
    for (int g = 0; g < heads; ++g) target.starts[g] = host.lengths[g];
    append_rows(dk.data(), dv.data(), dnew.data(), n, target, nullptr);
    append_rows_reference(k, v, new_positions, heads, d, host);
    REQUIRE(dkeys.download() == host.keys);  // copies: bit-equal
    REQUIRE(dvalues.download() == host.values);
    REQUIRE(dpositions.download() == host.positions);
    REQUIRE(dlengths.download() == host.lengths);
  }
}

TEST_CASE("pooled cosine-similarity maps match the reference, max and mean pooling") {
  const int n = 50, d = 32, block = 3;
  auto x = test::random_normal_floats(static_cast<std::size_t>(n) * d, 5);
  for (int t = 0; t < d; ++t) x[7 * d + t] = 0.0f;  // a zero vector has similarity 0 to everything
  DeviceBuffer<float> dx, unit(x.size()), out(17 * 17);
  dx.upload(x);
  for (bool max_pool : {true, false}) {
    pooled_cosine_similarity(dx.data(), n, d, block, max_pool, unit.data(), out.data(), nullptr);
    test::require_all_close(out.download(), pooled_cosine_similarity_reference(x, n, d, block, max_pool), 1e-5);
  }
}

TEST_CASE("element-wise kernels match the CPU backend") {
  kernels::Backend& cpu = kernels::default_cpu_backend();
  const int rows = 5, dim = 96;
  const auto x = test::random_normal_floats(rows * dim, 6), w = test::random_normal_floats(dim, 8),
             y = test::random_normal_floats(rows * dim, 9);
  DeviceBuffer<float> dx, dw, dy, dout(x.size());
  dx.upload(x);
  dw.upload(w);
  dy.upload(y);

  std::vector<float> want(x.size());
  cpu.rmsnorm(x.data(), w.data(), rows, dim, 1e-5f, want.data());
  rmsnorm_rows(dx.data(), dw.data(), rows, dim, 1e-5f, dout.data(), nullptr);
  test::require_all_close(dout.download(), want, 1e-5);

  cpu.swiglu(x.data(), y.data(), want.data(), want.size());
  swiglu(dx.data(), dy.data(), static_cast<int64_t>(x.size()), dout.data(), nullptr);
  test::require_all_close(dout.download(), want, 1e-5);

  want = x;
  cpu.add_bias(want.data(), w.data(), rows, dim);
  DeviceBuffer<float> biased;
  biased.upload(x);
  add_bias_rows(biased.data(), dw.data(), rows, dim, nullptr);
  test::require_all_close(biased.download(), want, 1e-6);

  want = x;
  cpu.add(want.data(), y.data(), want.size());
  DeviceBuffer<float> summed;
  summed.upload(x);
  add_in_place(summed.data(), dy.data(), static_cast<int64_t>(x.size()), nullptr);
  test::require_all_close(summed.download(), want, 1e-6);

  want = x;
  cpu.softmax(want.data(), dim);
  DeviceBuffer<float> soft;
  soft.upload(x);
  softmax_rows(soft.data(), 1, dim, nullptr);
  auto got = soft.download();
  got.resize(dim);
  want.resize(dim);
  test::require_all_close(got, want, 1e-6);
  CHECK(argmax(dx.data(), dim, nullptr) == static_cast<int>(std::max_element(x.begin(), x.begin() + dim) - x.begin()));

  for (auto style : {kernels::RopeStyle::AdjacentPairs, kernels::RopeStyle::HalfSplit}) {
    kernels::ModelShape shape;
    shape.head_dim = 32;
    shape.rope_dim = 32;
    shape.rope_base = 10000.0f;
    shape.rope_style = style;
    const int heads = 3;  // rows of 3 heads x 32 = 96 values
    const std::vector<int32_t> positions = {0, 1, 17, 300, 4095};
    want = x;
    cpu.rope(want.data(), rows, heads, positions.data(), shape);
    DeviceBuffer<float> rotated;
    DeviceBuffer<int32_t> dpos;
    rotated.upload(x);
    dpos.upload(positions);
    rope_rows(rotated.data(), rows, heads, 32, 32, dpos.data(), shape.rope_base,
              style == kernels::RopeStyle::AdjacentPairs, nullptr, nullptr);
    // The device's powf/sinf/cosf and glibc's may differ by an ulp; at position 4095 an ulp of the angle is
    // ~2e-4 rad, so values of size ~3 may differ by ~1e-3.
    test::require_all_close(rotated.download(), want, 2e-3);
  }
}

TEST_CASE("cuBLAS products of dequantized weights match the CPU backend's quantized matmul") {
  kernels::Backend& cpu = kernels::default_cpu_backend();
  const QuantCase c{kernels::GgmlType::Q4_0, 32, 18, {0}};
  const int out_rows = 48, cols = 128, n = 7;
  const auto blocks = random_blocks(c, out_rows * cols / 32, 10);
  const auto w = kernels::QuantMatrix::view(kernels::GgmlType::Q4_0, out_rows, cols, blocks.data());
  const auto x = test::random_normal_floats(static_cast<std::size_t>(n) * cols, 11);
  std::vector<float> want(static_cast<std::size_t>(n) * out_rows);
  cpu.matmul(w, x.data(), n, want.data());

  DeviceBuffer<uint8_t> raw;
  raw.upload(blocks);
  DeviceBuffer<uint16_t> halves(static_cast<std::size_t>(out_rows) * cols), scratch(static_cast<std::size_t>(n) * cols);
  dequantize_rows(c.type, raw.data(), out_rows, cols, static_cast<int64_t>(w.row_bytes), halves.data(),
                  DeviceFloat::F16, nullptr);
  DeviceBuffer<float> dx, y(want.size());
  dx.upload(x);
  CublasHandle cublas(nullptr);
  matmul(cublas, DeviceMatrix{halves.data(), DeviceFloat::F16, out_rows, cols}, dx.data(), n, scratch.data(), y.data(),
         nullptr);
  // f16 activations (11-bit mantissa) against float32: relative error ~1e-3 of the row's magnitude.
  const auto got = y.download();
  for (std::size_t i = 0; i < want.size(); ++i)
    REQUIRE(got[i] == Approx(want[i]).margin(2e-2 + 5e-3 * std::abs(want[i])));
}
