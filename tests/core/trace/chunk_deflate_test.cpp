// Chunks packed by chunk_deflate.cpp against two independent decoders: zlib's own uncompress (which also
// checks the Adler-32 trailer) and HDF5's filter pipeline reading the dataset back.
#include <hdf5.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/trace/chunk_deflate.h"
#include "core/trace/float16.h"
#include "core/trace/hdf5_util.h"
#include "tests/support/temp_file.h"

using namespace kvscope;
using namespace kvscope::trace;

namespace {

// Half-float probabilities with noisy mantissas; `zero_share` of the cells exactly 0.
std::vector<uint16_t> noisy_halves(std::size_t n, double zero_share, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<uint16_t> out(n);
  for (auto& h : out) h = u(rng) < zero_share ? 0 : float_to_half(u(rng) * u(rng) * 0.1f);
  return out;
}


std::vector<uint16_t> read_all(hid_t dataset, std::size_t n) {
  std::vector<uint16_t> back(n, 0xffff);
  REQUIRE(H5Dread(dataset, h5::half_type(), H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()) >= 0);
  return back;
}

}  // namespace

TEST_CASE("A packed half chunk is a zlib stream of the shuffled chunk", "[chunk_deflate]") {
  for (double zero_share : {0.0, 0.3, 0.9}) {  // noisy low plane (stored), mixed, mostly zero (deflated)
    const std::size_t n = 64 * 64;
    const auto halves = noisy_halves(n, zero_share, 11u);
    h5::ChunkLayout layout{{64, 64}, {64, 64}, 2, true, 1};
    const auto chunks = h5::pack_chunks(layout, {0, 0}, {64, 64}, halves.data(), false);
    REQUIRE(chunks);
    REQUIRE(chunks->size() == 1);
    // The shuffle, written out here: every element's low byte first, then every high byte.
    std::vector<unsigned char> want(2 * n);
    for (std::size_t i = 0; i < n; ++i) {
      want[i] = static_cast<unsigned char>(halves[i] & 0xff);
      want[n + i] = static_cast<unsigned char>(halves[i] >> 8);
    }
    std::vector<unsigned char> got(2 * n + 16);
    uLongf got_size = got.size();
    const auto& packed = chunks->front().bytes;
    INFO("zero share " << zero_share);
    REQUIRE(uncompress(got.data(), &got_size, packed.data(), packed.size()) == Z_OK);
    REQUIRE(got_size == want.size());
    got.resize(got_size);
    CHECK(got == want);
    CHECK(packed.size() < want.size());
  }
}

TEST_CASE("Whole-chunk writes read back through HDF5's filters, ragged edges and skipped zero chunks", "[chunk_deflate]") {
  const auto path = test::temp_file("chunks");
  h5::silence_errors();
  h5::Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  REQUIRE(file.valid());
  const hsize_t rows = 150, cols = 100;  // 3 x 2 chunks of 64 x 64, the last row and column ragged
  h5::Handle map = h5::create_dataset(file, "map", {h5::half_type(), {rows, cols}, {}, {64, 64}, 1, {"query", "key"}});
  auto values = noisy_halves(rows * cols, 0.2, 5u);
  for (hsize_t r = 0; r < 64; ++r)  // chunk (0, 1) all zero: never written, reads as the fill value
    for (hsize_t c = 64; c < cols; ++c) values[r * cols + c] = 0;
  const auto layout = h5::deflate_layout_of(map, 2);
  REQUIRE(layout);
  CHECK(layout->shuffle);
  CHECK(layout->level == 1);
  for (hsize_t r0 = 0; r0 < rows; r0 += 64) {  // in row bands, as the recorder sends them
    const hsize_t n = std::min<hsize_t>(64, rows - r0);
    const auto chunks = h5::pack_chunks(*layout, {r0, 0}, {n, cols}, values.data() + r0 * cols, true);
    REQUIRE(chunks);
    CHECK(chunks->size() == 2);
    if (r0 == 0) CHECK(chunks->at(1).bytes.empty());
    h5::write_packed_chunks(map, *chunks);
  }
  CHECK(read_all(map, rows * cols) == values);
  hsize_t stored = 123;
  const hsize_t zero_chunk[2] = {0, 64};
  H5Dget_chunk_storage_size(map, zero_chunk, &stored);
  CHECK(stored == 0);

  SECTION("a slab off the chunk grid is declined and written by H5Dwrite instead") {
    CHECK_FALSE(h5::pack_chunks(*layout, {10, 0}, {64, cols}, values.data(), false));
    std::vector<uint16_t> patch(5 * cols, float_to_half(0.5f));
    h5::write_slab(map, h5::half_type(), {70, 0}, {5, cols}, patch.data());
    auto want = values;
    std::copy(patch.begin(), patch.end(), want.begin() + 70 * cols);
    CHECK(read_all(map, rows * cols) == want);
  }
}

TEST_CASE("Step-by-step appends of a 3-D byte mask go through whole chunks and read back", "[chunk_deflate]") {
  const auto path = test::temp_file("chunks");
  h5::silence_errors();
  h5::Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  const hsize_t heads = 3, positions = 41;
  h5::Handle mask = h5::create_dataset(
      file, "mask", {H5T_STD_U8LE, {heads, positions, 0}, {heads, positions, H5S_UNLIMITED}, {heads, positions, 1}, 1, {}});
  std::mt19937 rng(3);
  std::vector<std::vector<uint8_t>> steps;
  for (hsize_t step = 0; step < 7; ++step) {
    std::vector<uint8_t> column(heads * positions);
    for (auto& b : column) b = static_cast<uint8_t>(rng() % 3);
    h5::extend(mask, 2, step + 1);
    CHECK(h5::write_whole_chunks(mask, {0, 0, step}, {heads, positions, 1}, column.data(), 1));
    steps.push_back(column);
  }
  std::vector<uint8_t> back(heads * positions * steps.size());
  REQUIRE(H5Dread(mask, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()) >= 0);
  int mismatches = 0;
  for (hsize_t h = 0; h < heads; ++h)
    for (hsize_t p = 0; p < positions; ++p)
      for (std::size_t s = 0; s < steps.size(); ++s)
        mismatches += back[(h * positions + p) * steps.size() + s] != steps[s][h * positions + p];
  CHECK(mismatches == 0);
}
