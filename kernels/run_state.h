#pragma once
// Scratch for one run's forward passes (llama2.c's RunState): allocated once per run by
// Backend::make_run_state for the largest number of rows a forward call of that run will take (the prefill
// block), never per call. All buffers are backend memory (device memory on CUDA): the engine passes them to
// the backend's ops and copies out only through Backend::to_host.
#include <cstddef>

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
};

}  // namespace kvscope::kernels
