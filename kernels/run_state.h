#pragma once
// Scratch for one run's forward passes (llama2.c's RunState): allocated once per run by
// Backend::make_run_state for the largest number of rows a forward call of that run will take (the prefill
// block), never per call. All buffers are backend memory (device memory on CUDA): the engine passes them to
// the backend's ops and copies out only through Backend::to_host.
#include <algorithm>
#include <array>
#include <cstddef>

#include "kernels/model_shape.h"

namespace kvscope::kernels {

struct RunState {
  virtual ~RunState() = default;

  int max_rows = 0;               // rows (tokens) a forward call may process
  float* x = nullptr;             // [max_rows][dim] residual stream
  float* xb = nullptr;            // [max_rows][dim] normed input of attention / FFN
  float* q = nullptr;             // [max_rows][n_heads * head_dim]
  float* k = nullptr;             // [max_rows][n_kv_heads * head_dim]
  float* v = nullptr;             // [max_rows][n_kv_heads * head_dim]
  float* attn_out = nullptr;      // [max_rows][n_heads * head_dim]
  float* attn_scratch = nullptr;  // [max_rows][n_heads * head_dim]: a second attention's output (a policy that
                                  // trims before the output, the full-cache shadow)
  float* gate = nullptr;          // [max_rows][ffn_dim]
  float* up = nullptr;            // [max_rows][ffn_dim]
  float* proj = nullptr;          // [max_rows][dim] output of wo / w_down
  float* logits = nullptr;        // [vocab] of the last row
  float* router_logits = nullptr;  // [max_rows][n_experts] (mixture-of-experts models; one float otherwise)
};

// Every buffer of a RunState with the floats it needs for max_rows rows (at least one row), so that each
// backend allocates the same set however it allocates memory.
struct RunStateBuffer {
  float** field;
  std::size_t floats;
};
// How many buffers run_state_buffers lists: a backend's storage is sized by it, so a new buffer cannot outgrow it.
inline constexpr std::size_t kRunStateBufferCount = 12;
inline std::array<RunStateBuffer, kRunStateBufferCount> run_state_buffers(RunState& s, const ModelShape& shape,
                                                                        int max_rows) {
  const std::size_t rows = static_cast<std::size_t>(std::max(max_rows, 1));
  return {{{&s.x, rows * shape.dim},
           {&s.xb, rows * shape.dim},
           {&s.q, rows * shape.q_width()},
           {&s.k, rows * shape.kv_width()},
           {&s.v, rows * shape.kv_width()},
           {&s.attn_out, rows * shape.q_width()},
           {&s.attn_scratch, rows * shape.q_width()},
           {&s.gate, rows * shape.ffn_dim},
           {&s.up, rows * shape.ffn_dim},
           {&s.proj, rows * shape.dim},
           {&s.logits, static_cast<std::size_t>(shape.vocab_size)},
           {&s.router_logits, rows * static_cast<std::size_t>(std::max(shape.n_experts, 1))}}};
}

}  // namespace kvscope::kernels
