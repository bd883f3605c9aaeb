#pragma once
// The CPU backend: host memory throughout, weights read in place from the mapped file, OpenMP across rows and
// heads, single-threaded OpenBLAS inside each thread's slice (one thread pool, no BLAS threads competing).
#include "kernels/backend.h"

namespace kvscope::kernels::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options);

  Device device() const override { return Device::Cpu; }
  std::string description() const override;

  void upload_weights(const ModelWeights&) override {}  // the mapped file is the weights' home
  std::unique_ptr<RunState> make_run_state(const ModelShape& shape, int max_rows) override;
  std::unique_ptr<KVStorage> make_kv_storage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type) override;
  void to_host(const float* src, float* host_dst, std::size_t n) override;
  void from_host(const float* host_src, float* dst, std::size_t n) override;

  void embedding_rows(const QuantMatrix& table, const int32_t* ids, int n, float* out) override;
  void matmul(const QuantMatrix& w, const float* x, int n, float* y) override;
  void matmul_shared_input(std::span<const MatmulTarget> targets, const float* x, int n) override;
  void rmsnorm(const float* x, const float* weight, int rows, int dim, float eps, float* out) override;
  void rope(float* x, int rows, int heads_per_row, const int32_t* positions, const ModelShape& shape) override;
  void add_bias(float* x, const float* bias, int rows, int width) override;
  void add(float* x, const float* y, std::size_t n) override;
  void swiglu(const float* gate, const float* up, float* out, std::size_t n) override;
  void softmax(float* x, int n) override;
  void scale(float* x, std::size_t n, float factor) override;
  void geglu(const float* gate, const float* up, float* out, std::size_t n) override;
  void attention(const KVStorage& kv, const AttentionCall& call, const AttentionRequest& request,
                 AttentionRowSink* rows, AttentionSideOutputs& side, float* out) override;
};

}  // namespace kvscope::kernels::cpu
