#include "core/trace/chunk_deflate.h"

#include <libdeflate.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "core/common/error.h"
#include "core/trace/hdf5_util.h"

namespace kvscope::trace::h5 {

namespace {

struct CompressorDeleter {
  void operator()(libdeflate_compressor* c) const { libdeflate_free_compressor(c); }
};

// One compressor per thread and level: allocating one costs more than compressing a small chunk.
libdeflate_compressor* compressor(int level) {
  thread_local int cached_level = -1;
  thread_local std::unique_ptr<libdeflate_compressor, CompressorDeleter> cached;
  if (cached_level != level) {
    cached.reset(libdeflate_alloc_compressor(level));
    if (!cached) throw Error("cannot allocate a deflate compressor at level " + std::to_string(level));
    cached_level = level;
  }
  return cached.get();
}

bool all_zero(const std::vector<unsigned char>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](unsigned char b) { return b == 0; });
}

// A zlib stream (RFC 1950/1951) of `data` whose first `stored` bytes go in stored (uncompressed) deflate
// blocks and the rest through libdeflate. After the shuffle, the first byte plane of a half-float map holds
// the low mantissa bits, which are noise: deflating them costs as much as the rest of the chunk and
// gains about a tenth, so they are copied instead. Any inflater reads the result.
std::size_t zlib_with_stored_prefix(libdeflate_compressor* deflater, const unsigned char* data, std::size_t size,
                                    std::size_t stored, std::vector<unsigned char>& out) {
  const std::size_t pieces = (stored + 65534) / 65535;
  const std::size_t rest_bound = libdeflate_deflate_compress_bound(deflater, size - stored);
  out.resize(2 + pieces * 5 + stored + rest_bound + 4);
  unsigned char* p = out.data();
  *p++ = 0x78;  // CMF: deflate, 32 KiB window
  *p++ = 0x9c;  // FLG: default level, no dictionary; (CMF * 256 + FLG) % 31 == 0
  for (std::size_t done = 0; done < stored;) {
    const std::size_t len = std::min<std::size_t>(65535, stored - done);
    *p++ = 0x00;  // BFINAL = 0, BTYPE = 00 (stored), then padding to the byte boundary
    *p++ = static_cast<unsigned char>(len & 0xff);
    *p++ = static_cast<unsigned char>(len >> 8);
    *p++ = static_cast<unsigned char>(~len & 0xff);
    *p++ = static_cast<unsigned char>((~len >> 8) & 0xff);
    std::memcpy(p, data + done, len);
    p += len;
    done += len;
  }
  // A stored block ends on a byte boundary, so the compressed blocks may follow directly; their last
  // block carries BFINAL.
  const std::size_t n = libdeflate_deflate_compress(deflater, data + stored, size - stored, p, rest_bound);
  if (n == 0) return 0;
  p += n;
  const uint32_t adler = libdeflate_adler32(1, data, size);
  for (int shift = 24; shift >= 0; shift -= 8) *p++ = static_cast<unsigned char>(adler >> shift);
  return static_cast<std::size_t>(p - out.data());
}

// The low byte plane is worth deflating only when most of it is zero (sparse maps, zero padding).
bool low_plane_is_noise(const unsigned char* plane, std::size_t size) {
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < size; ++i) zeros += plane[i] == 0;
  return zeros * 2 < size;
}

}  // namespace

void shuffle_bytes(const unsigned char* in, std::size_t n_elements, std::size_t element_size, unsigned char* out) {
  if (element_size == 2) {  // the half-float maps: the common case, kept simple enough to vectorise
    for (std::size_t i = 0; i < n_elements; ++i) {
      out[i] = in[2 * i];
      out[n_elements + i] = in[2 * i + 1];
    }
    return;
  }
  for (std::size_t i = 0; i < n_elements; ++i)
    for (std::size_t b = 0; b < element_size; ++b) out[b * n_elements + i] = in[i * element_size + b];
}

std::optional<ChunkLayout> deflate_layout_of(hid_t dataset, std::size_t element_size) {
  Handle dcpl(H5Dget_create_plist(dataset));
  if (!dcpl.valid() || H5Pget_layout(dcpl) != H5D_CHUNKED) return std::nullopt;
  ChunkLayout layout;
  layout.dims = dataset_dims(dataset);
  const int rank = static_cast<int>(layout.dims.size());
  layout.chunk.resize(layout.dims.size());
  if (rank == 0 || H5Pget_chunk(dcpl, rank, layout.chunk.data()) != rank) return std::nullopt;
  layout.element_size = element_size;
  const int n = H5Pget_nfilters(dcpl);
  bool deflate = false;
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0, cd_values[4] = {0, 0, 0, 0};
    std::size_t cd_count = 4;
    char name[64];
    const H5Z_filter_t id = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &cd_count, cd_values, sizeof name, name, &config);
    if (id == H5Z_FILTER_SHUFFLE && i == 0) {
      layout.shuffle = true;
    } else if (id == H5Z_FILTER_DEFLATE && i == n - 1 && cd_count >= 1) {
      deflate = true;
      layout.level = static_cast<int>(cd_values[0]);
    } else {
      return std::nullopt;  // a pipeline we do not reproduce
    }
  }
  if (!deflate || layout.level < 1 || layout.level > 9) return std::nullopt;
  return layout;
}

std::optional<std::vector<PackedChunk>> pack_chunks(const ChunkLayout& layout, const std::vector<hsize_t>& offset,
                                                    const std::vector<hsize_t>& count, const void* data,
                                                    bool skip_zero_chunks) {
  const int rank = static_cast<int>(count.size());
  if (rank == 0 || offset.size() != count.size() || layout.dims.size() != count.size() || layout.chunk.size() != count.size())
    return std::nullopt;
  std::vector<hsize_t> grid(static_cast<std::size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    const hsize_t end = offset[d] + count[d];
    if (layout.chunk[d] == 0) return std::nullopt;
    if (count[d] == 0) return std::vector<PackedChunk>{};
    if (offset[d] % layout.chunk[d] != 0 || end > layout.dims[d] || (end % layout.chunk[d] != 0 && end != layout.dims[d]))
      return std::nullopt;
    grid[d] = (count[d] + layout.chunk[d] - 1) / layout.chunk[d];
  }

  const std::size_t esize = layout.element_size;
  std::size_t chunk_elements = 1;
  for (hsize_t c : layout.chunk) chunk_elements *= c;
  const std::size_t chunk_bytes = chunk_elements * esize;
  std::vector<unsigned char> plain(chunk_bytes), shuffled(layout.shuffle && esize > 1 ? chunk_bytes : 0);
  libdeflate_compressor* deflater = compressor(layout.level);
  const std::size_t bound = libdeflate_zlib_compress_bound(deflater, chunk_bytes);
  const auto* src = static_cast<const unsigned char*>(data);

  // Walk the slab's chunk grid with an odometer; inside a chunk, copy runs along the last dimension from
  // the slab into the chunk buffer, whose cells beyond the extent stay zero (HDF5 pads edge chunks too).
  std::vector<PackedChunk> out;
  std::vector<hsize_t> index(static_cast<std::size_t>(rank), 0), extent(static_cast<std::size_t>(rank));
  std::vector<hsize_t> inner(static_cast<std::size_t>(rank));
  while (true) {
    PackedChunk packed;
    packed.offset.resize(static_cast<std::size_t>(rank));
    for (int d = 0; d < rank; ++d) {
      packed.offset[d] = offset[d] + index[d] * layout.chunk[d];
      extent[d] = std::min<hsize_t>(layout.chunk[d], offset[d] + count[d] - packed.offset[d]);
    }
    std::fill(plain.begin(), plain.end(), 0);
    std::fill(inner.begin(), inner.end(), 0);
    const std::size_t run_bytes = extent[rank - 1] * esize;
    while (true) {
      std::size_t from = 0, to = 0;
      for (int d = 0; d < rank; ++d) {
        from = from * count[d] + (packed.offset[d] - offset[d] + inner[d]);
        to = to * layout.chunk[d] + inner[d];
      }
      std::memcpy(plain.data() + to * esize, src + from * esize, run_bytes);
      int d = rank - 2;
      while (d >= 0 && ++inner[d] == extent[d]) inner[d--] = 0;
      if (d < 0) break;
    }
    if (!(skip_zero_chunks && all_zero(plain))) {
      const unsigned char* filtered = plain.data();
      std::size_t n = 0;
      if (!shuffled.empty()) {
        shuffle_bytes(plain.data(), chunk_elements, esize, shuffled.data());
        filtered = shuffled.data();
        if (low_plane_is_noise(filtered, chunk_elements))
          n = zlib_with_stored_prefix(deflater, filtered, chunk_bytes, chunk_elements, packed.bytes);
      }
      if (n == 0) {
        packed.bytes.resize(bound);
        n = libdeflate_zlib_compress(deflater, filtered, chunk_bytes, packed.bytes.data(), bound);
      }
      if (n == 0) throw Error("deflate failed on a chunk of " + std::to_string(chunk_bytes) + " bytes");
      packed.bytes.resize(n);
      packed.bytes.shrink_to_fit();
    }
    out.push_back(std::move(packed));
    int d = rank - 1;
    while (d >= 0 && ++index[d] == grid[d]) index[d--] = 0;
    if (d < 0) break;
  }
  return out;
}

void write_packed_chunks(hid_t dataset, const std::vector<PackedChunk>& chunks) {
  for (const PackedChunk& c : chunks) {
    if (c.bytes.empty()) continue;
    check_status(H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, c.offset.data(), c.bytes.size(), c.bytes.data()),
                 "cannot write a chunk of '" + name_of(dataset) + "'");
  }
}

bool write_whole_chunks(hid_t dataset, const std::vector<hsize_t>& offset, const std::vector<hsize_t>& count,
                        const void* data, std::size_t element_size) {
  const auto layout = deflate_layout_of(dataset, element_size);
  if (!layout) return false;
  const auto chunks = pack_chunks(*layout, offset, count, data, false);
  if (!chunks) return false;
  write_packed_chunks(dataset, *chunks);
  return true;
}

}  // namespace kvscope::trace::h5
