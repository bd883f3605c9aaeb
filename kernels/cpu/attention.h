#pragma once
// Exact causal attention over the CPU storage's ragged cache, with the side outputs a request asks for
// (Backend::attention's contract). Decode (one query) runs heads in parallel over the rows as stored (f32 or
// f16, float32 accumulation); prefill runs heads in parallel, each with single-threaded BLAS on blocks of
// queries, so the n x n matrix is never held whole.
#include "kernels/backend.h"
#include "kernels/cpu/cpu_kv_storage.h"

namespace kvscope::kernels::cpu {

void attention(const CpuKVStorage& kv, const AttentionCall& call, const AttentionRequest& request,
               AttentionRowSink* rows, AttentionSideOutputs& side, float* out);

}  // namespace kvscope::kernels::cpu
