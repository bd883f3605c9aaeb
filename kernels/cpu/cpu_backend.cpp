#include "kernels/cpu/cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/common/softmax_math.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_kv_storage.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/error.h"

extern "C" void openblas_set_num_threads(int);

namespace kvscope::kernels::cpu {

namespace {
// The buffers behind a RunState, one allocation per run.
struct CpuRunState final : RunState {
  std::vector<float> memory;
};
}  // namespace

CpuBackend::CpuBackend(const BackendOptions& options) {
  if (options.threads > 0) omp_set_num_threads(options.threads);
  // The kernels call BLAS from inside their own OpenMP regions; BLAS threads would only compete.
  openblas_set_num_threads(1);
}

std::string CpuBackend::description() const {
  return "cpu: " + std::to_string(omp_get_max_threads()) + " threads, AVX2/F16C, OpenBLAS";
}

std::unique_ptr<RunState> CpuBackend::make_run_state(const ModelShape& shape, int max_rows) {
  auto state = std::make_unique<CpuRunState>();
  const auto buffers = run_state_buffers(*state, shape, max_rows);
  std::size_t total = 0;
  for (const RunStateBuffer& b : buffers) total += b.floats;
  state->memory.assign(total, 0.0f);
  float* next = state->memory.data();
  for (const RunStateBuffer& b : buffers) {
    *b.field = next;
    next += b.floats;
  }
  state->max_rows = std::max(max_rows, 1);
  return state;
}

std::unique_ptr<KVStorage> CpuBackend::make_kv_storage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type) {
  return std::make_unique<CpuKVStorage>(n_layers, n_kv_heads, head_dim, type);
}

void CpuBackend::to_host(const float* src, float* host_dst, std::size_t n) { std::copy_n(src, n, host_dst); }
void CpuBackend::from_host(const float* host_src, float* dst, std::size_t n) { std::copy_n(host_src, n, dst); }

void CpuBackend::embedding_rows(const QuantMatrix& table, const int32_t* ids, int n, float* out) {
  for (int i = 0; i < n; ++i) embedding_row(table, ids[i], out + static_cast<std::size_t>(i) * table.cols);
}

void CpuBackend::matmul(const QuantMatrix& w, const float* x, int n, float* y) { kernels::matmul(w, x, n, y); }

void CpuBackend::matmul_shared_input(std::span<const MatmulTarget> targets, const float* x, int n) {
  kernels::matmul_shared_input(targets, x, n);
}

void CpuBackend::rmsnorm(const float* x, const float* weight, int rows, int dim, float eps, float* out) {
  for (int r = 0; r < rows; ++r)
    kernels::rmsnorm(x + static_cast<std::size_t>(r) * dim, weight, dim, eps, out + static_cast<std::size_t>(r) * dim);
}

void CpuBackend::rope(float* x, int rows, int heads_per_row, const int32_t* positions, const ModelShape& shape) {
  const float* divisors = shape.rope_freq_divisors.empty() ? nullptr : shape.rope_freq_divisors.data();
  const std::size_t width = static_cast<std::size_t>(heads_per_row) * shape.head_dim;
  // A decode step has one row: a parallel region would only add a barrier for the other threads.
#pragma omp parallel for schedule(static) if (rows > 1)
  for (int r = 0; r < rows; ++r)
    kernels::rope(x + r * width, heads_per_row, shape.head_dim, shape.rope_dim, positions[r], shape.rope_base,
                  shape.rope_style, divisors, shape.rope_attention_factor);
}

void CpuBackend::add_bias(float* x, const float* bias, int rows, int width) { kernels::add_bias(x, bias, rows, width); }

void CpuBackend::add(float* x, const float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] += y[i];
}

void CpuBackend::swiglu(const float* gate, const float* up, float* out, std::size_t n) {
  kernels::swiglu(gate, up, out, static_cast<int>(n));
}

void CpuBackend::softmax(float* x, int n) { kernels::softmax(x, n); }

void CpuBackend::scale(float* x, std::size_t n, float factor) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= factor;
}

void CpuBackend::geglu(const float* gate, const float* up, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = geglu_element(gate[i], up[i]);
}

void CpuBackend::attention(const KVStorage& kv, const AttentionCall& call, const AttentionRequest& request,
                           AttentionRowSink* rows, AttentionSideOutputs& side, float* out) {
  const auto* cpu_kv = dynamic_cast<const CpuKVStorage*>(&kv);
  if (!cpu_kv) throw Error("the cpu backend cannot attend over K/V storage made by another backend");
  cpu::attention(*cpu_kv, call, request, rows, side, out);
}

}  // namespace kvscope::kernels::cpu
