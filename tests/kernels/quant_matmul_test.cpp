// The quantized decode path (dot products on the blocks) and the prefill path (dequantize + BLAS) against a
// direct loop over the dequantized weights.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/common/dequantize.h"

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

void check_type(kernels::GgmlType type, int header_halves, int payload, int block_bytes) {
  const int rows = 45, cols = 128, blocks_per_row = cols / 32;
  auto data = random_blocks(rows * blocks_per_row, header_halves, payload, 3);
  kernels::QuantMatrix w{type, rows, cols, data.data(), static_cast<std::size_t>(blocks_per_row * block_bytes)};
  std::vector<float> dense(rows * cols);
  for (int r = 0; r < rows; ++r) kernels::dequantize_row(type, w.row(r), &dense[r * cols], cols);
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
  for (int n : {1, 3, 8}) {
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
}
