#pragma once
// The host reference of attention.cu: a direct O(n^2) loop in double over the same layout, filling the same
// side outputs. Plain C++, built with or without the CUDA toolkit; the GPU tests compare the kernels with it
// and a CPU test compares it with the CPU backend's attention.
#include <cstdint>
#include <vector>

namespace kvscope::kernels::cuda {

struct HostLayerCache {
  std::vector<float> keys, values;  // [n_kv_heads][capacity][head_dim]
  std::vector<int32_t> positions;   // [n_kv_heads][capacity]
  std::vector<int32_t> lengths;     // [n_kv_heads]
  int capacity = 0;
};

struct HostAttentionResult {
  std::vector<float> out;          // [n_queries][n_heads][head_dim]
  std::vector<float> log_sum_exp;  // [n_heads][n_queries]
  int window = 0;                  // min(w, n_queries)
  // Per head, stride capacity; entries beyond a head's length stay 0.
  std::vector<float> column_sums, window_sums, last_row;  // [n_heads][capacity]
  std::vector<float> window_rows;                         // [n_heads][window][capacity]
  std::vector<float> rows;                                // [n_heads][n_queries][capacity]
};

// q: [n_queries][n_heads][head_dim]; query_positions: [n_queries]; scale usually 1/sqrt(head_dim).
HostAttentionResult attention_reference(const std::vector<float>& q, const std::vector<int32_t>& query_positions,
                                        const HostLayerCache& cache, int n_heads, int n_kv_heads, int head_dim,
                                        float scale, int window);

}  // namespace kvscope::kernels::cuda
