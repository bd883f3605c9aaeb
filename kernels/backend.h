#pragma once
// The compute backend: every operation the engine, the KV cache and the recorder run on model data, behind one
// interface chosen at run time (`--device cpu|cuda`). kernels/cpu implements it with BLAS and OpenMP;
// kernels/cuda mirrors it file by file with cuBLAS and its own kernels; the per-element math both share lives in
// kernels/common as __host__ __device__ functions.
//
// Ownership. The backend owns its copy of the weights (upload_weights; the CPU backend reads the mapped file in
// place), the K/V rows (KVStorage), and each run's scratch (RunState). The engine owns the control flow: it
// calls the ops layer by layer, hands the attention side outputs to the policy and the observers (host code), and
// applies the policy's edits through KVCache, which calls KVStorage::edit.
//
// Memory. "Backend memory" below is memory of the backend's device: a RunState's buffers, what KVStorage
// holds. Host memory is ordinary memory. Pointers to weights (QuantMatrix, norm and bias vectors) are the host
// views of the ModelWeights given to upload_weights; a backend that copies weights translates them to its own
// copy. On the CPU backend memory and host memory are the same.
//
// Errors. Bad arguments (an unknown device, a type the backend cannot read) throw kvscope::Error or UsageError
// (kernels/error.h) with a message naming the value and what was expected; a backend never aborts the process.
// Threads. One backend object is used by one run at a time; ops are not called concurrently on it.
//
// Plugging in CUDA. kernels/cuda/CMakeLists.txt builds a library that defines
//   std::unique_ptr<Backend> kvscope::kernels::cuda::make_cuda_backend(const BackendOptions&);
// and adds the compile definition KVSCOPE_WITH_CUDA to kvscope_kernels, whose make_backend then calls it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kernels/attention_io.h"
#include "kernels/kv_storage.h"
#include "kernels/model_shape.h"
#include "kernels/model_weights.h"
#include "kernels/run_state.h"

namespace kvscope::kernels {

enum class Device { Cpu, Cuda };
// "cpu" or "cuda"; throws UsageError naming the value and the choices.
Device parse_device(std::string_view name);
const char* device_name(Device device);

struct BackendOptions {
  int threads = 0;       // CPU: OpenMP threads for the kernels (0 = all cores, or OMP_NUM_THREADS)
  int device_index = 0;  // CUDA: which GPU
};

// One product of a shared input: y = x W^T (backend memory).
struct MatmulTarget {
  const QuantMatrix* w;
  float* y;
};

// One layer's attention call. Each query attends to the entries of its KV head whose original position is <= its
// own (the cache may hold any subset of earlier positions; entries are ordered by position).
struct AttentionCall {
  int layer = 0;
  int n_heads = 0;                           // query heads; n_kv_heads and head_dim come from the storage
  const float* q = nullptr;                  // backend memory [n][n_heads][head_dim], after RoPE
  int n = 0;                                 // queries in this call
  const int32_t* query_positions = nullptr;  // host [n], increasing
  // Gemma: scores s become c * tanh(s / c) before the softmax (0: not capped), and a query at position p sees
  // only keys at positions > p - sliding_window (0: every earlier key).
  float logit_softcap = 0.0f;
  int sliding_window = 0;
  // gpt-oss: one learned logit per query head (host [n_heads]) that joins every row's softmax denominator and
  // attends to no value, so each row's probabilities sum to 1 minus the sink's share (nullptr: none).
  const float* sinks = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // One line for `kvscope info` and a trace's provenance, e.g. "cpu: 2 threads, AVX2, OpenBLAS" or
  // "cuda: NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)".
  virtual std::string description() const = 0;

  // --- Memory -------------------------------------------------------------------------------------------------
  // Called by every Engine made on this backend, before any op reads the weights (the CLI and the window make
  // an Engine per run). A backend that keeps its own copy makes it here, keeps it while the same ModelWeights
  // object comes back, and replaces it when another one arrives.
  virtual void upload_weights(const ModelWeights& weights) = 0;
  // Scratch for one run whose forward calls take at most max_rows tokens.
  virtual std::unique_ptr<RunState> make_run_state(const ModelShape& shape, int max_rows) = 0;
  // Empty K/V storage for a cache of the given geometry.
  virtual std::unique_ptr<KVStorage> make_kv_storage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type) = 0;
  // Copies n floats between backend memory and host memory (synchronous: the data is there when they return).
  virtual void to_host(const float* src, float* host_dst, std::size_t n) = 0;
  virtual void from_host(const float* host_src, float* dst, std::size_t n) = 0;

  // --- Ops (all activations in backend memory) ----------------------------------------------------------------
  // out[i][dim] = row ids[i] of the embedding table, dequantized. ids: host [n], already range-checked.
  virtual void embedding_rows(const QuantMatrix& table, const int32_t* ids, int n, float* out) = 0;
  // y[n][w.rows] = x[n][w.cols] * W^T, W in its stored type, float32 accumulation.
  virtual void matmul(const QuantMatrix& w, const float* x, int n, float* y) = 0;
  // Several products of the same input (q, k and v; gate and up); every W has the same number of columns.
  virtual void matmul_shared_input(std::span<const MatmulTarget> targets, const float* x, int n) = 0;
  // out[r] = x[r] / rms(x[r]) * weight for rows r < rows of dim values (in place allowed). weight: [dim].
  virtual void rmsnorm(const float* x, const float* weight, int rows, int dim, float eps, float* out) = 0;
  // Rotates every head of every row to its position: x is [rows][heads_per_row][shape.head_dim], row r at
  // positions[r] (host [rows]); the first shape.rope_dim dimensions turn, paired as shape.rope_style says, with
  // shape.rope_freq_divisors when present.
  virtual void rope(float* x, int rows, int heads_per_row, const int32_t* positions, const ModelShape& shape) = 0;
  // x[r][j] += bias[j] for rows r < rows, j < width.
  virtual void add_bias(float* x, const float* bias, int rows, int width) = 0;
  // x[i] += y[i] (the residual connection).
  virtual void add(float* x, const float* y, std::size_t n) = 0;
  // out[i] = silu(gate[i]) * up[i] (out may be gate).
  virtual void swiglu(const float* gate, const float* up, float* out, std::size_t n) = 0;
  // In-place numerically stable softmax over n values.
  virtual void softmax(float* x, int n) = 0;
  // Gemma's ops. A backend without them refuses a Gemma model with a message naming the op.
  // x[i] *= factor.
  virtual void scale(float* x, std::size_t n, float factor);
  // out[i] = gelu_tanh(gate[i]) * up[i] (out may be gate): GeGLU with PyTorch's tanh approximation.
  virtual void geglu(const float* gate, const float* up, float* out, std::size_t n);

  // Exact causal attention of call.n queries over the layer's entries in `kv`: writes out[n][n_heads][head_dim]
  // (backend memory) and the side outputs `request` asks for (host; see AttentionSideOutputs), and streams
  // every probability row to `rows` when request.rows (rows may be null otherwise). Softmax and the products
  // accumulate in float32 whatever the cache type. side.n_keys and side.window are always set.
  virtual void attention(const KVStorage& kv, const AttentionCall& call, const AttentionRequest& request,
                         AttentionRowSink* rows, AttentionSideOutputs& side, float* out) = 0;
};

// The backend for `device`. Device::Cuda throws Error when this build has no CUDA (CMake found no CUDA toolkit)
// or when no usable GPU or driver is present, with the reason; never aborts.
std::unique_ptr<Backend> make_backend(Device device, const BackendOptions& options = {});

// Non-empty when `types` on `device` runs code that was written and compiled but has never run on that device
// (docs/gpu.md, "Cache types on the device"): the one-line warning the command line and the window print before
// such a run. Empty for the paths that ran on a GPU (cuda with an f32 cache) and for every cpu run.
std::string unverified_device_note(Device device, const KVCacheTypes& types);

// The process-wide CPU backend, for code that has no backend of its own (a KVCache made without one, tests).
Backend& default_cpu_backend();

}  // namespace kvscope::kernels
