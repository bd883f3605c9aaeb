// The quantized decode path (dot products on the blocks) and the prefill path (dequantize + BLAS) against a
// direct loop over the dequantized weights.
#include <catch2/catch.hpp>
#include <omp.h>

#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/common/dequantize.h"
#include "kernels/cpu/quant_dot.h"

using namespace kvscope;

namespace {

// Random blocks of a 32-element format: `header` bytes of halves (scales), then `payload` random bytes.
std::vector<uint8_t> random_blocks(int blocks, int header_halves, int payload, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> out;
  for (int b = 0; b < blocks; ++b) {
    for (int h = 0; h < header_halves; ++h) {
      const uint16_t bits = kernels::fp32_to_fp16(scale(rng));
      out.push_back(bits & 0xFF);
      out.push_back(bits >> 8);
    }
    for (int i = 0; i < payload; ++i) out.push_back(static_cast<uint8_t>(byte(rng)));
  }
  return out;
}

// The reference: every row dequantized on its own (the format's definition), row-major.
std::vector<float> dequantized(const kernels::QuantMatrix& w) {
  std::vector<float> dense(static_cast<std::size_t>(w.rows) * w.cols);
  for (int r = 0; r < w.rows; ++r) kernels::dequantize_row(w.type, w.row(r), &dense[static_cast<std::size_t>(r) * w.cols], w.cols);
  return dense;
}

void check_type(kernels::GgmlType type, int header_halves, int payload, int block_bytes) {
  const int rows = 45, cols = 128, blocks_per_row = cols / 32;
  auto data = random_blocks(rows * blocks_per_row, header_halves, payload, 3);
  kernels::QuantMatrix w{type, rows, cols, data.data(), static_cast<std::size_t>(blocks_per_row * block_bytes)};
  const std::vector<float> dense = dequantized(w);
  std::mt19937 rng(9);
  std::normal_distribution<float> dist;
  for (int n : {1, 2, 9}) {
    std::vector<float> x(n * cols), y(n * rows);
    for (auto& v : x) v = dist(rng);
    kernels::matmul(w, x.data(), n, y.data());
    for (int i = 0; i < n; ++i)
      for (int r = 0; r < rows; ++r) {
        double s = 0;
        for (int c = 0; c < cols; ++c) s += double(dense[r * cols + c]) * x[i * cols + c];
        REQUIRE(y[i * rows + r] == Approx(s).margin(1e-4));
      }
  }
}

}  // namespace

// Each instruction set's row kernels against a double-precision loop over the dequantized rows, for every
// remainder of the four-row groups and row ranges that start mid-matrix (a thread's share).
void check_row_kernels(kernels::DotIsa isa, kernels::GgmlType type, int header_halves, int payload, int block_bytes) {
  const int rows = 23, cols = 96, blocks_per_row = cols / 32;
  auto data = random_blocks(rows * blocks_per_row, header_halves, payload, 11);
  kernels::QuantMatrix w{type, rows, cols, data.data(), static_cast<std::size_t>(blocks_per_row * block_bytes)};
  const std::vector<float> dense = dequantized(w);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  std::vector<float> x(cols), sums(blocks_per_row);
  for (auto& v : x) v = dist(rng);
  kernels::block_sums32(x.data(), cols, sums.data());
  for (const auto& [r0, r1] : {std::pair{0, rows}, std::pair{3, 4}, std::pair{5, 7}, std::pair{1, 4}, std::pair{6, 17}}) {
    std::vector<float> y(r1 - r0, -1.0f);
    kernels::quant_dot_rows(isa, w, r0, r1, x.data(), sums.data(), y.data());
    for (int r = r0; r < r1; ++r) {
      double s = 0;
      for (int c = 0; c < cols; ++c) s += double(dense[r * cols + c]) * x[c];
      REQUIRE(y[r - r0] == Approx(s).margin(1e-4));
    }
  }
}

TEST_CASE("the AVX2 and AVX-512 row kernels equal the dequantized product") {
  std::vector<kernels::DotIsa> isas{kernels::DotIsa::Avx2};
  if (kernels::quant_dot_isa() == kernels::DotIsa::Avx512) isas.push_back(kernels::DotIsa::Avx512);
  else WARN("this CPU has no AVX-512: only the AVX2 kernels are checked");
  for (const kernels::DotIsa isa : isas) {
    INFO(kernels::dot_isa_name(isa));
    check_row_kernels(isa, kernels::GgmlType::Q4_1, 2, 16, 20);
    check_row_kernels(isa, kernels::GgmlType::Q4_0, 1, 16, 18);
    check_row_kernels(isa, kernels::GgmlType::Q8_0, 1, 32, 34);
  }
}

TEST_CASE("Q4_1 matmul equals the dequantized product") { check_type(kernels::GgmlType::Q4_1, 2, 16, 20); }
TEST_CASE("Q4_0 matmul equals the dequantized product") { check_type(kernels::GgmlType::Q4_0, 1, 16, 18); }
TEST_CASE("Q8_0 matmul equals the dequantized product") { check_type(kernels::GgmlType::Q8_0, 1, 32, 34); }

TEST_CASE("matmul_shared_input equals separate products, in decode and prefill") {
  const int cols = 64;
  std::vector<std::vector<uint8_t>> data;
  std::vector<kernels::QuantMatrix> mats;
  for (int m = 0; m < 3; ++m) {
    const int rows = 10 + 7 * m;
    data.push_back(random_blocks(rows * cols / 32, 2, 16, 20 + m));
    mats.push_back({kernels::GgmlType::Q4_1, rows, cols, data.back().data(), static_cast<std::size_t>(cols / 32 * 20)});
  }
  std::mt19937 rng(4);
  std::normal_distribution<float> dist;
  // Three threads split 10 + 17 + 24 rows into shares that begin and end inside the matrices.
  const int threads_before = omp_get_max_threads();
  for (const auto& [n, threads] : {std::pair{1, 1}, std::pair{1, 3}, std::pair{3, 3}, std::pair{3, 1}, std::pair{8, 2}}) {
    omp_set_num_threads(threads);
    std::vector<float> x(n * cols);
    for (auto& v : x) v = dist(rng);
    std::vector<std::vector<float>> together(3), apart(3);
    std::vector<kernels::MatmulTarget> targets;
    for (int m = 0; m < 3; ++m) {
      together[m].resize(n * mats[m].rows);
      apart[m].resize(n * mats[m].rows);
      targets.push_back({&mats[m], together[m].data()});
      kernels::matmul(mats[m], x.data(), n, apart[m].data());
    }
    kernels::matmul_shared_input(targets, x.data(), n);
    for (int m = 0; m < 3; ++m)
      for (std::size_t i = 0; i < apart[m].size(); ++i) REQUIRE(together[m][i] == Approx(apart[m][i]).margin(1e-5));
  }
  omp_set_num_threads(threads_before);
}
