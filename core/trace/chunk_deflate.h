#pragma once
// Whole chunks of a dataset, shuffled and deflated here with libdeflate and handed to HDF5 by
// H5Dwrite_chunk. HDF5's own deflate filter (zlib) was the recorder's largest cost; libdeflate makes the
// same zlib streams about 2.5x faster, and packing needs no HDF5 call, so the compute threads can pack
// their own maps in parallel and leave the writer thread only the I/O. The chunks are exactly what HDF5's
// shuffle + deflate pipeline stores, so every reader decodes them with its standard filters.
#include <hdf5.h>

#include <cstddef>
#include <optional>
#include <vector>

namespace kvscope::trace::h5 {

// What packing a dataset's chunks needs to know.
struct ChunkLayout {
  std::vector<hsize_t> dims;   // the dataset's extent once the slab is written
  std::vector<hsize_t> chunk;  // chunk shape
  std::size_t element_size = 0;
  bool shuffle = false;
  int level = 0;  // deflate level, 1..9
};

struct PackedChunk {
  std::vector<hsize_t> offset;       // first element of the chunk, chunk-aligned
  std::vector<unsigned char> bytes;  // the filtered chunk; empty when the chunk is all zero and left unwritten
};

// The layout of a chunked dataset whose filters are deflate or shuffle + deflate, or nullopt for any
// other storage (contiguous, no filters, other filters).
std::optional<ChunkLayout> deflate_layout_of(hid_t dataset, std::size_t element_size);

// Cuts [offset, offset + count) of a dataset (row-major `data` in the file type) into whole chunks and
// filters each; nullopt unless the slab starts on a chunk boundary and ends on one (or at the extent) in
// every dimension. With skip_zero_chunks, chunks with only zero bytes are not packed: unwritten chunks
// read as the fill value 0, so this is right only for chunks nothing was written to before.
std::optional<std::vector<PackedChunk>> pack_chunks(const ChunkLayout& layout, const std::vector<hsize_t>& offset,
                                                    const std::vector<hsize_t>& count, const void* data,
                                                    bool skip_zero_chunks);

// Writes packed chunks (skipping the empty ones).
void write_packed_chunks(hid_t dataset, const std::vector<PackedChunk>& chunks);

// deflate_layout_of + pack_chunks + write_packed_chunks; false (nothing written) when either declines.
bool write_whole_chunks(hid_t dataset, const std::vector<hsize_t>& offset, const std::vector<hsize_t>& count,
                        const void* data, std::size_t element_size);

// HDF5's shuffle filter: byte b of element i goes to position b * n + i (exposed for its test).
void shuffle_bytes(const unsigned char* in, std::size_t n_elements, std::size_t element_size, unsigned char* out);

}  // namespace kvscope::trace::h5
