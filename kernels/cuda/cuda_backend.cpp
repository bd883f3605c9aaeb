// The CUDA backend: weights dequantized once to f16/bf16 (f32 stays f32) on upload, products through cuBLAS,
// everything else through the kernels of this folder, K/V rows in CudaKVStorage. Host pointers to weights are
// translated to their device copies by address (the ModelWeights given to upload_weights stay alive for the
// model's lifetime). Side outputs are computed on the device and only the requested, per-head reductions are
// copied back.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_kv_storage.h"
#include "kernels/cuda/dequantize.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/pinned_staging.h"
#include "kernels/error.h"

namespace kvscope::kernels::cuda {
namespace {

// Enough room for n values; grows, never shrinks (scratch reused across calls).
template <typename T>
T* room(DeviceBuffer<T>& buffer, std::size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

struct CudaRunState final : RunState {
  // One per run_state_buffers entry: a fixed 11 here overflowed into the heap once that list grew to 12 (a
  // mixture-of-experts buffer), which crashed every CUDA run on the H200 with a corrupted heap.
  std::array<DeviceBuffer<float>, kRunStateBufferCount> buffers;
};

DeviceFloat device_type_for(GgmlType type) {
  if (type == GgmlType::F32) return DeviceFloat::F32;
  if (type == GgmlType::BF16) return DeviceFloat::BF16;
  return DeviceFloat::F16;  // F16 itself and every block type: their values fit f16's range
}

std::size_t device_float_bytes(DeviceFloat t) { return t == DeviceFloat::F32 ? 4 : 2; }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_index) {
    check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
    cublas_ = std::make_unique<CublasHandle>(stream_);
    staging_ = std::make_unique<PinnedStaging>(stream_, kStagingBytes);
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device_index), "cudaGetDeviceProperties");
    char memory[32];
    std::snprintf(memory, sizeof memory, "%.1f GiB",
                  static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    description_ = std::string("cuda: ") + prop.name + " (sm_" + std::to_string(prop.major) +
                   std::to_string(prop.minor) + ", " + memory + ")";
  }
  ~CudaBackend() override {
    staging_.reset();
    cublas_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::Cuda; }
  std::string description() const override { return description_; }

  void upload_weights(const ModelWeights& weights) override {
    // Every Engine calls this; the copy stays while the same weights come back (the embedding's address too,
    // in case another ModelWeights object was made at the same place).
    if (&weights == uploaded_ && weights.token_embedding.data == uploaded_embedding_) return;
    for (const LayerWeights& l : weights.layers)
      if (!l.expert_gate.empty())
        throw Error(
            "the CUDA backend does not run mixture-of-experts models (routed experts); run this model with "
            "--device cpu");
    matrices_.clear();
    vectors_.clear();
    uploaded_ = &weights;
    uploaded_embedding_ = weights.token_embedding.data;
    upload_matrix(weights.token_embedding);
    upload_matrix(weights.output);
    upload_vector(weights.output_norm);
    for (const LayerWeights& l : weights.layers) {
      for (const QuantMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) upload_matrix(*m);
      for (const std::vector<float>* v : {&l.attn_norm, &l.ffn_norm, &l.bq, &l.bk, &l.bv, &l.bo, &l.q_norm, &l.k_norm})
        upload_vector(*v);
    }
    check_cuda(cudaStreamSynchronize(stream_), "upload_weights");
  }

  std::unique_ptr<RunState> make_run_state(const ModelShape& shape, int max_rows) override {
    auto state = std::make_unique<CudaRunState>();
    state->max_rows = std::max(max_rows, 1);
    const auto buffers = run_state_buffers(*state, shape, max_rows);
    for (std::size_t i = 0; i < buffers.size(); ++i) *buffers[i].field = room(state->buffers[i], buffers[i].floats);
    const std::size_t rows = std::max(max_rows, 1);
    // Scratch the ops need, sized once per run here rather than on a forward call.
    const std::size_t widest = std::max({shape.dim, shape.ffn_dim, shape.q_width()});
    room(activation_scratch_, rows * widest * 2);  // two uint16 per value: room for f32 as well
    room(row_positions_, rows);
    uploaded_positions_.clear();  // room() may have reallocated the buffer
    room(row_ids_, rows);
    return state;
  }

  std::unique_ptr<KVStorage> make_kv_storage(int n_layers, int n_kv_heads, int head_dim, KVCacheTypes type) override {
    return std::make_unique<CudaKVStorage>(n_layers, n_kv_heads, head_dim, type, stream_);
  }

  void to_host(const float* src, float* host_dst, std::size_t n) override {
    check_cuda(cudaMemcpyAsync(host_dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_), "to_host");
    check_cuda(cudaStreamSynchronize(stream_), "to_host");
  }
  void from_host(const float* host_src, float* dst, std::size_t n) override {
    check_cuda(cudaMemcpyAsync(dst, host_src, n * sizeof(float), cudaMemcpyHostToDevice, stream_), "from_host");
    check_cuda(cudaStreamSynchronize(stream_), "from_host");
  }

  void embedding_rows(const QuantMatrix& table, const int32_t* ids, int n, float* out) override {
    const DeviceMatrix& m = device_matrix(table);
    gather_rows_as_float(m.data, m.type, m.cols, upload_ints(row_ids_, ids, n), n, out, stream_);
  }

  void matmul(const QuantMatrix& w, const float* x, int n, float* y) override {
    const DeviceMatrix& m = device_matrix(w);
    void* scratch = room(activation_scratch_, static_cast<std::size_t>(n) * m.cols * 2);
    cuda::matmul(*cublas_, m, x, n, scratch, y, stream_);
  }

  void matmul_shared_input(std::span<const MatmulTarget> targets, const float* x, int n) override {
    // Converted to the weights' device type once for all the products (q, k, v; gate, up) when they share it.
    if (targets.empty()) return;
    const DeviceMatrix& first = device_matrix(*targets.front().w);
    const bool shared = std::all_of(targets.begin(), targets.end(), [&](const MatmulTarget& t) {
      const DeviceMatrix& m = device_matrix(*t.w);
      return m.type == first.type && m.cols == first.cols;
    });
    if (!shared) {
      for (const MatmulTarget& t : targets) matmul(*t.w, x, n, t.y);
      return;
    }
    void* scratch = room(activation_scratch_, static_cast<std::size_t>(n) * first.cols * 2);
    const void* typed = convert_input(first, x, n, scratch, stream_);
    for (const MatmulTarget& t : targets) cuda::gemm(*cublas_, device_matrix(*t.w), typed, n, t.y);
  }

  void rmsnorm(const float* x, const float* weight, int rows, int dim, float eps, float* out) override {
    rmsnorm_rows(x, device_vector(weight), rows, dim, eps, out, stream_);
  }

  void rope(float* x, int rows, int heads_per_row, const int32_t* positions, const ModelShape& shape) override {
    if (shape.rope_attention_factor != 1.0f)
      throw Error("the CUDA backend does not apply longrope's attention factor (" +
                  std::to_string(shape.rope_attention_factor) +
                  ", Phi-3 rope scaling); run this model with --device cpu");
    const float* divisors = nullptr;
    if (!shape.rope_freq_divisors.empty()) {
      if (rope_divisors_host_ != shape.rope_freq_divisors) {
        rope_divisors_host_ = shape.rope_freq_divisors;
        rope_divisors_.resize(rope_divisors_host_.size());
        staging_->upload(rope_divisors_.data(), rope_divisors_host_);
      }
      divisors = rope_divisors_.data();
    }
    rope_rows(x, rows, heads_per_row, shape.head_dim, shape.rope_dim, upload_positions(positions, rows),
              shape.rope_base, shape.rope_style == RopeStyle::AdjacentPairs, divisors, stream_);
  }

  void add_bias(float* x, const float* bias, int rows, int width) override {
    add_bias_rows(x, device_vector(bias), rows, width, stream_);
  }
  void add(float* x, const float* y, std::size_t n) override { add_in_place(x, y, static_cast<int64_t>(n), stream_); }
  void swiglu(const float* gate, const float* up, float* out, std::size_t n) override {
    cuda::swiglu(gate, up, static_cast<int64_t>(n), out, stream_);
  }
  void softmax(float* x, int n) override { softmax_rows(x, 1, n, stream_); }

  void attention(const KVStorage& kv, const AttentionCall& call, const AttentionRequest& request,
                 AttentionRowSink* rows, AttentionSideOutputs& side, float* out) override {
    const auto* storage = dynamic_cast<const CudaKVStorage*>(&kv);
    if (!storage) throw Error("CUDA attention: the KV storage was not made by the CUDA backend");
    if (call.logit_softcap > 0.0f || call.sliding_window > 0 || call.sinks)
      throw Error("CUDA attention: layer " + std::to_string(call.layer) +
                  " asks for soft-capped, sliding-window or sink attention (Gemma, gpt-oss), which the CUDA "
                  "kernels do not compute (run this model with --device cpu)");
    const DeviceLayerCache cache = storage->layer_view(call.layer);
    const int n = call.n, heads = call.n_heads, n_kv = kv.n_kv_heads();
    AttentionShape shape{n, heads, n_kv, kv.head_dim(), 1.0f / std::sqrt(static_cast<float>(kv.head_dim()))};
    const std::size_t cap = std::max(cache.capacity, 1);
    const int window = request.window > 0 ? std::min(request.window, n) : 0;
    AttentionOutputs o;
    o.out = out;
    o.log_sum_exp = room(lse_, static_cast<std::size_t>(heads) * std::max(n, 1));
    o.window = window;
    if (request.column_sums) o.column_sums = room(column_sums_, heads * cap);
    // Requested outputs always come back, one vector per head (all zeros, or empty rows, when window is 0),
    // as the CPU backend returns them.
    if (request.window_sums) o.window_sums = room(window_sums_, heads * cap);
    if (request.window_rows) o.window_rows = room(window_rows_, heads * std::max(window, 1) * cap);
    if (request.last_row) o.last_row = room(last_row_, heads * cap);
    if (request.rows) o.rows = room(rows_, heads * static_cast<std::size_t>(n) * cap);
    o.key_splits = attention_key_splits(n, cache.max_length);
    if (o.key_splits > 1)
      o.split_partials =
          room(split_partials_, static_cast<std::size_t>(o.key_splits) * heads * n * (kv.head_dim() + 2));
    cuda::attention(call.q, upload_positions(call.query_positions, n), cache, shape, o, stream_);

    side.n_keys.assign(n_kv, 0);
    for (int g = 0; g < n_kv; ++g) side.n_keys[g] = kv.size(call.layer, g);
    side.window = window;
    const int group = heads / n_kv;
    auto keys_of = [&](int h) { return static_cast<std::size_t>(side.n_keys[h / group]); };
    // [heads][blocks][cap] on the device to per-head [blocks * keys] on the host.
    auto per_head = [&](const float* device, int blocks, std::vector<std::vector<float>>& dst) {
      const std::vector<float> all = download(device, heads * blocks * cap);
      dst.assign(heads, {});
      for (int h = 0; h < heads; ++h) {
        const std::size_t m = keys_of(h);
        dst[h].resize(blocks * m);
        for (int b = 0; b < blocks; ++b)
          std::copy_n(all.begin() + (static_cast<std::size_t>(h) * blocks + b) * cap, m, dst[h].begin() + b * m);
      }
    };
    if (request.column_sums) per_head(o.column_sums, 1, side.column_sums);
    if (request.window_sums) per_head(o.window_sums, 1, side.window_sums);
    if (request.window_rows) per_head(o.window_rows, window, side.window_rows);
    if (request.last_row) per_head(o.last_row, 1, side.last_row);
    if (request.log_sum_exp) {
      const std::vector<float> all = download(o.log_sum_exp, static_cast<std::size_t>(heads) * n);
      side.log_sum_exp.assign(heads, {});
      for (int h = 0; h < heads; ++h)
        side.log_sum_exp[h].assign(all.begin() + static_cast<std::size_t>(h) * n,
                                   all.begin() + static_cast<std::size_t>(h + 1) * n);
    }
    if (o.rows && rows) {
      std::vector<std::vector<float>> map;
      per_head(o.rows, n, map);
      for (int h = 0; h < heads; ++h) rows->on_rows(h, 0, n, static_cast<int>(keys_of(h)), map[h].data());
    }
  }

 private:
  struct DeviceMatrixStorage {
    DeviceBuffer<uint16_t> data;  // f16/bf16 values, or f32 values as uint16 pairs
    DeviceMatrix view;
  };

  void upload_matrix(const QuantMatrix& m) {
    if (!m.data || matrices_.count(m.data)) return;  // absent, or tied to one already uploaded
    DeviceBuffer<uint8_t> raw;
    raw.upload(m.data, m.row_bytes * m.rows, stream_);
    DeviceMatrixStorage s;
    const DeviceFloat type = device_type_for(m.type);
    s.data.resize(static_cast<std::size_t>(m.rows) * m.cols * device_float_bytes(type) / 2);
    dequantize_rows(m.type, raw.data(), m.rows, m.cols, static_cast<int64_t>(m.row_bytes), s.data.data(), type,
                    stream_);
    check_cuda(cudaStreamSynchronize(stream_), "upload_weights");  // `raw` is freed on return
    s.view = DeviceMatrix{s.data.data(), type, m.rows, m.cols};
    matrices_.emplace(m.data, std::move(s));
  }

  void upload_vector(const std::vector<float>& v) {
    if (v.empty() || vectors_.count(v.data())) return;
    DeviceBuffer<float> d;
    d.upload(v, stream_);
    vectors_.emplace(v.data(), std::move(d));
  }

  const DeviceMatrix& device_matrix(const QuantMatrix& m) const {
    const auto it = matrices_.find(m.data);
    if (it == matrices_.end())
      throw Error("CUDA backend: a " + std::to_string(m.rows) + " x " + std::to_string(m.cols) +
                  " weight matrix was not uploaded (upload_weights must see every matrix first)");
    return it->second.view;
  }

  const float* device_vector(const float* host) const {
    const auto it = vectors_.find(host);
    if (it == vectors_.end()) throw Error("CUDA backend: a norm or bias vector was not uploaded by upload_weights");
    return it->second.data();
  }

  const int32_t* upload_ints(DeviceBuffer<int32_t>& buffer, const int32_t* host, int n) {
    int32_t* d = room(buffer, std::max(n, 1));
    if (n > 0) staging_->upload(d, host, n * sizeof(int32_t));
    return d;
  }

  // A step's positions go to RoPE for q and k and to attention, in every layer: uploaded once while they stay the
  // same (row_positions_ is written nowhere else).
  const int32_t* upload_positions(const int32_t* host, int n) {
    if (row_positions_.size() >= static_cast<std::size_t>(std::max(n, 1)) &&
        std::equal(host, host + n, uploaded_positions_.begin(), uploaded_positions_.end()))
      return row_positions_.data();
    const int32_t* d = upload_ints(row_positions_, host, n);
    uploaded_positions_.assign(host, host + n);
    return d;
  }

  std::vector<float> download(const float* device, std::size_t n) {
    std::vector<float> host(n);
    if (n > 0) {
      check_cuda(cudaMemcpyAsync(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost, stream_), "download");
      check_cuda(cudaStreamSynchronize(stream_), "download");
    }
    return host;
  }

  static constexpr std::size_t kStagingBytes = std::size_t{4} << 20;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CublasHandle> cublas_;
  std::unique_ptr<PinnedStaging> staging_;  // small uploads (ids, positions) that must not stall the stream
  std::vector<int32_t> uploaded_positions_;  // what row_positions_ holds
  std::string description_;
  const ModelWeights* uploaded_ = nullptr;
  const uint8_t* uploaded_embedding_ = nullptr;
  std::unordered_map<const void*, DeviceMatrixStorage> matrices_;
  std::unordered_map<const void*, DeviceBuffer<float>> vectors_;
  DeviceBuffer<uint16_t> activation_scratch_;
  DeviceBuffer<int32_t> row_positions_, row_ids_;
  DeviceBuffer<float> rope_divisors_;
  std::vector<float> rope_divisors_host_;
  DeviceBuffer<float> split_partials_, lse_, column_sums_, window_sums_, window_rows_, last_row_, rows_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  try {
    require_cuda_device(options.device_index);
  } catch (const Error& e) {
    throw Error(std::string("device cuda: ") + e.what());  // names the flag's value, as a build without CUDA does
  }
  return std::make_unique<CudaBackend>(options.device_index);
}

}  // namespace kvscope::kernels::cuda
