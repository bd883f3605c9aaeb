// gpt-oss's MXFP4 experts rewritten into ggml's rows at load (core/model/mxfp4_experts.h): the threaded rewrite gives
// the bytes of a one-row-at-a-time loop (the loader's before it was threaded), and those bytes decode to the values
// transformers' layout holds.
#include "core/model/mxfp4_experts.h"

#include <omp.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "core/model/ggml_type.h"
#include "kernels/common/dequantize.h"

using kvscope::model::Mxfp4Experts;

namespace {

struct RandomExperts {
  std::vector<uint8_t> blocks, scales;
  Mxfp4Experts view;
  RandomExperts(uint64_t experts, uint64_t rows, uint64_t cols, unsigned seed)
      : blocks(experts * rows * cols / 2), scales(experts * rows * cols / 32) {
    std::mt19937 rng(seed);
    for (auto& b : blocks) b = static_cast<uint8_t>(rng());
    for (auto& s : scales) s = static_cast<uint8_t>(118 + rng() % 16);  // 2^-9 .. 2^6
    view = {blocks.data(), scales.data(), rows, cols / 32};
  }
};

// The loader's rewrite before it was threaded, value by value: expert by expert, gate_up's rows de-interleaved, then
// down's; in each block ggml's value j (low nibble of byte j) and j + 16 (high nibble) from transformers' value v in
// byte v / 2, low nibble for even v.
void one_row_at_a_time_into(const Mxfp4Experts& gate_up, const Mxfp4Experts& down, uint64_t E, uint64_t D, uint64_t I,
                            uint8_t* out) {
  const kvscope::model::GgmlMxfp4Layout layout(D, I);
  const auto copy_row = [](const Mxfp4Experts& from, uint64_t e, uint64_t r, uint8_t* row) {
    for (uint64_t g = 0; g < from.groups; ++g) {
      const uint64_t block = (e * from.rows + r) * from.groups + g;
      const uint8_t* codes = from.blocks + block * 16;
      const auto code = [&](uint64_t value) { return (codes[value / 2] >> (4 * (value % 2))) & 0x0F; };
      uint8_t* out_block = row + g * 17;
      out_block[0] = from.scales[block];
      for (uint64_t j = 0; j < 16; ++j) out_block[1 + j] = static_cast<uint8_t>(code(j) | code(j + 16) << 4);
    }
  };
  for (uint64_t e = 0; e < E; ++e) {
    uint8_t* gate = out + e * layout.expert_bytes;
    uint8_t* up = gate + I * layout.gate_row;
    uint8_t* down_rows = up + I * layout.gate_row;
    for (uint64_t i = 0; i < I; ++i) {
      copy_row(gate_up, e, 2 * i, gate + i * layout.gate_row);
      copy_row(gate_up, e, 2 * i + 1, up + i * layout.gate_row);
    }
    for (uint64_t d = 0; d < D; ++d) copy_row(down, e, d, down_rows + d * layout.down_row);
  }
}

// As the loader allocated it: a zeroed vector.
std::vector<uint8_t> one_row_at_a_time(const Mxfp4Experts& gate_up, const Mxfp4Experts& down, uint64_t E, uint64_t D,
                                       uint64_t I) {
  std::vector<uint8_t> out(E * kvscope::model::GgmlMxfp4Layout(D, I).expert_bytes);
  one_row_at_a_time_into(gate_up, down, E, D, I, out.data());
  return out;
}

std::vector<uint8_t> threaded(const Mxfp4Experts& gate_up, const Mxfp4Experts& down, uint64_t E, uint64_t D,
                              uint64_t I) {
  std::vector<uint8_t> out(E * kvscope::model::GgmlMxfp4Layout(D, I).expert_bytes);
  kvscope::model::write_ggml_mxfp4_experts(gate_up, down, E, D, I, out.data());
  return out;
}

// Row r of expert e as transformers' layout holds it: E2M1 code of value 2j in byte j's low nibble, 2j + 1 in its
// high nibble, times 2^(scale - 127).
std::vector<float> transformers_row(const RandomExperts& x, uint64_t e, uint64_t r, uint64_t cols) {
  static const float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<float> row(cols);
  for (uint64_t c = 0; c < cols; ++c) {
    const uint64_t block = (e * x.view.rows + r) * x.view.groups + c / 32;
    const uint8_t byte = x.blocks[block * 16 + (c % 32) / 2];
    row[c] = kE2M1[(byte >> (4 * (c % 2))) & 0x0F] * std::ldexp(1.0f, x.scales[block] - 127);
  }
  return row;
}

struct Threads {
  int saved = omp_get_max_threads();
  explicit Threads(int n) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(saved); }
};

}  // namespace

TEST_CASE("the threaded MXFP4 rewrite gives the one-row-at-a-time loop's bytes, which decode to transformers' values",
          "[mxfp4]") {
  const uint64_t E = 5, D = 96, I = 64;  // gate_up: 2I rows of D values, down: D rows of I
  const RandomExperts gate_up(E, 2 * I, D, 1), down(E, D, I, 2);
  const auto reference = one_row_at_a_time(gate_up.view, down.view, E, D, I);
  for (const int threads : {1, 3, 4}) {
    INFO(threads << " threads");
    const Threads team(threads);
    CHECK(threaded(gate_up.view, down.view, E, D, I) == reference);
  }
  // Expert 3's up row 5 (gate_up row 11) and down row 7, decoded by the kernels, against transformers' layout.
  const kvscope::model::GgmlMxfp4Layout layout(D, I);
  const std::size_t gate_row = layout.gate_row, down_row = layout.down_row;
  const uint8_t* expert = reference.data() + 3 * layout.expert_bytes;
  std::vector<float> up(D), down_values(I);
  kvscope::kernels::dequantize_row(kvscope::model::GgmlType::MXFP4, expert + (I + 5) * gate_row, up.data(), D);
  kvscope::kernels::dequantize_row(kvscope::model::GgmlType::MXFP4, expert + 2 * I * gate_row + 7 * down_row,
                                   down_values.data(), I);
  CHECK(up == transformers_row(gate_up, 3, 11, D));
  CHECK(down_values == transformers_row(down, 3, 7, I));
}

// A measurement, run by hand (hidden): one layer of gpt-oss-20b's experts (32 of gate_up 5760 x 2880 and down
// 2880 x 2880), rewritten value by value one row at a time (the loader before) and by the threaded rewrite with 1
// and all of OpenMP's threads. Each time includes allocating the output; the threaded rewrite's is left
// uninitialised as the loader's is.
TEST_CASE("MXFP4 rewrite time for one gpt-oss-20b layer", "[.][mxfp4_speed]") {
  const uint64_t E = 32, D = 2880, I = 2880;
  const RandomExperts gate_up(E, 2 * I, D, 1), down(E, D, I, 2);
  const auto ms = [](auto&& fn) {
    double best = 1e30;
    for (int run = 0; run < 5; ++run) {
      const auto start = std::chrono::steady_clock::now();
      fn();
      best =
          std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
  };
  std::vector<uint8_t> serial;
  const std::size_t bytes = E * kvscope::model::GgmlMxfp4Layout(D, I).expert_bytes;
  std::unique_ptr<uint8_t[]> rewritten;
  const double serial_ms = ms([&] { serial = one_row_at_a_time(gate_up.view, down.view, E, D, I); });
  std::vector<uint8_t> touched(bytes, 1);  // pages already faulted in: the rewrite's own time
  const double serial_touched_ms =
      ms([&] { one_row_at_a_time_into(gate_up.view, down.view, E, D, I, touched.data()); });
  std::printf("one row at a time: %.1f ms a layer, %.2f s for 24 layers (%.1f ms into touched pages)\n", serial_ms,
              serial_ms * 24 / 1000, serial_touched_ms);
  const int all = omp_get_max_threads();
  for (const int threads : {1, all}) {
    const Threads team(threads);
    const double threaded_ms = ms([&] {
      rewritten.reset(new uint8_t[bytes]);
      kvscope::model::write_ggml_mxfp4_experts(gate_up.view, down.view, E, D, I, rewritten.get());
    });
    const double touched_ms =
        ms([&] { kvscope::model::write_ggml_mxfp4_experts(gate_up.view, down.view, E, D, I, touched.data()); });
    std::printf("threaded, %d threads: %.1f ms a layer, %.2f s for 24 layers (%.1f ms into touched pages)\n", threads,
                threaded_ms, threaded_ms * 24 / 1000, touched_ms);
    CHECK(std::equal(serial.begin(), serial.end(), rewritten.get()));
    CHECK(touched == serial);
  }
}
