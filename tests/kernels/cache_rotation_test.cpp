// The Hadamard rotation of stored K/V rows (--cache-rotation hadamard): the transform against the Sylvester
// matrix written out, the blocks llama.cpp rotates in, and the CPU storage's frames: rows stored rotated, every
// reader (read_rows, merges, the storage error) in the model's frame.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/common/block_quantize.h"
#include "kernels/common/hadamard.h"
#include "kernels/common/quant_blocks.h"
#include "kernels/cpu/cpu_kv_storage.h"

using namespace kvscope;
using kernels::CacheType;
using kernels::KVPart;

namespace {

// H[i][j] = (-1)^popcount(i & j) / sqrt(n), llama.cpp's ggml_gen_hadamard written as a formula.
double sylvester(int n, int i, int j) {
  return (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) / std::sqrt(static_cast<double>(n));
}

std::vector<float> random_rows(int n, int d, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> rows(static_cast<std::size_t>(n) * d);
  for (auto& x : rows) x = dist(rng);
  // An outlier dimension, as real keys have: what the rotation spreads over the row's blocks.
  for (int r = 0; r < n; ++r) rows[static_cast<std::size_t>(r) * d + 3] *= 20.0f;
  return rows;
}

kernels::KVCacheTypes rotated(kernels::KVCacheTypes types) {
  types.rotate_keys = types.rotate_values = true;
  return types;
}

std::vector<float> read(const kernels::cpu::CpuKVStorage& s, KVPart part) {
  std::vector<float> out(static_cast<std::size_t>(s.size(0, 0)) * s.head_dim());
  s.read_rows(0, 0, part, 0, s.size(0, 0), out.data());
  return out;
}

}  // namespace

TEST_CASE("the fast Walsh-Hadamard transform is the normalised Sylvester matrix, its own inverse") {
  for (int n : {2, 8, 32, 64, 128}) {
    INFO("block " << n);
    const std::vector<float> x = random_rows(1, n, 5u + n);
    std::vector<float> y = x;
    kernels::hadamard_rotate(y.data(), n, n);
    for (int i = 0; i < n; ++i) {
      double expected = 0.0;
      for (int j = 0; j < n; ++j) expected += sylvester(n, i, j) * x[j];
      REQUIRE(y[i] == Approx(expected).margin(1e-5));
    }
    kernels::hadamard_rotate(y.data(), n, n);
    for (int i = 0; i < n; ++i) REQUIRE(y[i] == Approx(x[i]).margin(1e-5));
  }
  // A row of 128 in blocks of 64: each half rotated alone.
  std::vector<float> row = random_rows(1, 128, 9u), halves = row;
  kernels::hadamard_rotate(row.data(), 128, 64);
  kernels::hadamard_rotate(halves.data(), 64, 64);
  kernels::hadamard_rotate(halves.data() + 64, 64, 64);
  for (int i = 0; i < 128; ++i) REQUIRE(row[i] == halves[i]);
}

TEST_CASE("keys rotate in the largest power of two dividing head_dim, values in blocks of at most 64 (llama.cpp)") {
  CHECK(kernels::hadamard_block(true, 64) == 64);
  CHECK(kernels::hadamard_block(false, 64) == 64);
  CHECK(kernels::hadamard_block(true, 128) == 128);
  CHECK(kernels::hadamard_block(false, 128) == 64);
  CHECK(kernels::hadamard_block(true, 256) == 256);
  CHECK(kernels::hadamard_block(true, 96) == 32);
  CHECK(kernels::hadamard_block(false, 80) == 16);
}

TEST_CASE("a rotated q4_0 cache stores the quantized rotated rows and reads back the model's rows") {
  const int d = 128, n = 5;
  const std::vector<float> rows = random_rows(n, d, 17u);
  std::vector<int32_t> positions = {0, 1, 2, 3, 4};
  kernels::cpu::CpuKVStorage storage(1, 1, d, rotated(CacheType::Q4_0));
  storage.append(0, rows.data(), rows.data(), n, positions.data());
  CHECK(storage.host_f32_rows(0, 0, KVPart::Keys) == nullptr);
  const std::size_t row_bytes = storage.row_bytes(KVPart::Keys);
  REQUIRE(row_bytes == kernels::cache_row_bytes(CacheType::Q4_0, d));  // bytes unchanged
  double error = 0.0, reference = 0.0;
  for (KVPart part : {KVPart::Keys, KVPart::Values}) {
    const int block = part == KVPart::Keys ? 128 : 64;
    const std::vector<float> back = read(storage, part);
    for (int r = 0; r < n; ++r) {
      std::vector<float> x(rows.begin() + r * d, rows.begin() + (r + 1) * d);
      kernels::hadamard_rotate(x.data(), d, block);
      std::vector<uint8_t> expected(row_bytes);
      for (int b = 0; b < d / 32; ++b)
        kernels::blocks::quantize_block_q4_0(x.data() + b * 32, expected.data() + b * kernels::blocks::kQ4_0Bytes);
      const uint8_t* stored = storage.blocks(0, 0, part) + r * row_bytes;
      REQUIRE(std::vector<uint8_t>(stored, stored + row_bytes) == expected);
      std::vector<float> model(d);
      for (int b = 0; b < d / 32; ++b)
        kernels::blocks::dequantize_block_q4_0(expected.data() + b * kernels::blocks::kQ4_0Bytes,
                                               model.data() + b * 32);
      kernels::hadamard_rotate(model.data(), d, block);
      for (int j = 0; j < d; ++j) {
        REQUIRE(back[r * d + j] == Approx(model[j]).margin(1e-6));
        if (part == KVPart::Keys) {
          error += std::pow(static_cast<double>(rows[r * d + j]) - back[r * d + j], 2);
          reference += std::pow(static_cast<double>(rows[r * d + j]), 2);
        }
      }
    }
  }
  // The recorded error is the model frame's: the computed row against the row read back.
  CHECK(storage.storage_error(0, KVPart::Keys, false).relative_nmse() == Approx(error / reference).epsilon(1e-9));
}

TEST_CASE("merges and evictions of a rotated cache act on the model's rows") {
  const int d = 64, n = 6;
  const std::vector<float> keys = random_rows(n, d, 23u), values = random_rows(n, d, 29u);
  std::vector<int32_t> positions = {0, 1, 2, 3, 4, 5};
  const std::vector<int32_t> keep = {0, 2, 4, 5};
  const std::vector<kernels::RowMerge> merges = {{2, {1, 3}, {0.5f, 0.25f, 0.25f}}};
  const std::vector<kernels::ValueMerge> value_merges = {{1, {4}, 0.3f}};

  SECTION("float32: the same rows as the unrotated cache, within rounding") {
    kernels::cpu::CpuKVStorage plain(1, 1, d, CacheType::F32), turned(1, 1, d, rotated(CacheType::F32));
    for (auto* s : {&plain, &turned}) {
      s->append(0, keys.data(), values.data(), n, positions.data());
      s->edit(0, 0, keep, merges, value_merges);
    }
    for (KVPart part : {KVPart::Keys, KVPart::Values}) {
      const std::vector<float> a = read(plain, part), b = read(turned, part);
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == Approx(a[i]).margin(1e-5));
    }
  }
  SECTION("q4_0: a merged row is the model-frame merge, rotated, quantized once and rotated back") {
    kernels::cpu::CpuKVStorage s(1, 1, d, rotated(CacheType::Q4_0));
    s.append(0, keys.data(), values.data(), n, positions.data());
    const std::vector<float> before = read(s, KVPart::Keys);
    s.edit(0, 0, keep, merges, {});
    std::vector<float> merged(d);
    for (int j = 0; j < d; ++j)
      merged[j] = 0.5f * before[2 * d + j] + 0.25f * before[1 * d + j] + 0.25f * before[3 * d + j];
    std::vector<float> expected = merged;
    kernels::hadamard_rotate(expected.data(), d, 64);
    std::vector<uint8_t> blocks(kernels::cache_row_bytes(CacheType::Q4_0, d));
    for (int b = 0; b < d / 32; ++b) {
      kernels::blocks::quantize_block_q4_0(expected.data() + b * 32, blocks.data() + b * kernels::blocks::kQ4_0Bytes);
      kernels::blocks::dequantize_block_q4_0(blocks.data() + b * kernels::blocks::kQ4_0Bytes, expected.data() + b * 32);
    }
    kernels::hadamard_rotate(expected.data(), d, 64);
    const std::vector<float> after = read(s, KVPart::Keys);
    double error = 0.0, reference = 0.0;
    for (int j = 0; j < d; ++j) {
      REQUIRE(after[1 * d + j] == Approx(expected[j]).margin(1e-6));  // entry 2 is kept second
      REQUIRE(after[0 * d + j] == before[0 * d + j]);                 // a kept row is not quantized again
      error += std::pow(static_cast<double>(merged[j]) - after[1 * d + j], 2);
      reference += std::pow(static_cast<double>(merged[j]), 2);
    }
    CHECK(s.storage_error(0, KVPart::Keys, true).relative_nmse() == Approx(error / reference).epsilon(1e-6));
  }
}

TEST_CASE("cache type names carry the rotation and parse back") {
  auto types = kernels::parse_cache_types("q4_0:rot=hadamard");
  CHECK(types.rotate_keys);
  CHECK(types.rotate_values);
  CHECK(kernels::cache_type_name(types) == "q4_0:rot=hadamard");
  CHECK(kernels::parse_cache_types(kernels::cache_type_name(types)) == types);
  types = kernels::parse_cache_types("q4_0", "q4_0:rot=hadamard", "");
  CHECK(types.rotate_keys);
  CHECK_FALSE(types.rotate_values);
  CHECK(kernels::cache_type_name(types) == "k=q4_0:rot=hadamard,v=q4_0");
  CHECK(kernels::cache_type_name(kernels::parse_cache_types("kivi2:group=16,residual=64,rot=hadamard")) ==
        "kivi2:group=16,residual=64,rot=hadamard");
  CHECK(kernels::cache_type_name(kernels::parse_cache_types("q8_0")) == "q8_0");  // unrotated names unchanged
  REQUIRE_THROWS_WITH(kernels::parse_cache_types("q4_0:rot=givens"), Catch::Contains("rot=givens is not a rotation"));
}
