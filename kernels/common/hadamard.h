#pragma once
// The Hadamard rotation of cached rows (`--cache-rotation hadamard`, kv_storage.h's KVCacheTypes::rotate_*): a
// row of head_dim values is cut into blocks of `block` consecutive values (a power of two) and each block x
// becomes H x, with H the normalised Sylvester Hadamard matrix, H[i][j] = (-1)^popcount(i & j) / sqrt(block).
// H is symmetric and orthogonal, so H H = I: the same call rotates a row and rotates it back, and dot products
// (q . k) and norms are unchanged. Computed as a fast Walsh-Hadamard transform, block log2(block) additions and
// one scaling a block (O(D log D) a row, no matrix).
#include <cmath>

namespace kvscope::kernels {

// The block a part is rotated in, as llama.cpp chooses it (src/llama-kv-cache.cpp, build_input_k_rot and
// build_input_v_rot): keys in the largest power of two that divides head_dim, values in blocks of 64 (llama.cpp
// found the smaller block better for values), both no larger than that power. llama.cpp rotates only when
// head_dim is a multiple of 64; for other head_dims kvscope keeps the same rule (e.g. 96: blocks of 32).
inline int hadamard_block(bool keys, int head_dim) {
  int block = 1;
  while (head_dim % (block * 2) == 0 && block * 2 <= head_dim) block *= 2;
  return keys ? block : (block < 64 ? block : 64);
}

// Rotates `row` (head_dim values) in place, block by block. Self-inverse.
inline void hadamard_rotate(float* row, int head_dim, int block) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(block));
  for (int b = 0; b < head_dim; b += block) {
    float* x = row + b;
    for (int half = 1; half < block; half *= 2)
      for (int i = 0; i < block; i += 2 * half)
        for (int j = i; j < i + half; ++j) {
          const float a = x[j], c = x[j + half];
          x[j] = a + c;
          x[j + half] = a - c;
        }
    for (int j = 0; j < block; ++j) x[j] *= norm;
  }
}

// Rotates `count` rows, row r at rows + r * stride.
inline void hadamard_rotate_rows(float* rows, int count, long long stride, int head_dim, int block) {
  for (int r = 0; r < count; ++r) hadamard_rotate(rows + r * stride, head_dim, block);
}

}  // namespace kvscope::kernels
