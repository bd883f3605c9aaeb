#pragma once
// A minimal GGUF writer for tests: builds valid files byte by byte and records where each field sits, so
// that a test can corrupt exactly one field. It shares no code with the reader it tests.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace kvscope::test {

// GGUF metadata value type ids (gguf spec).
enum : uint32_t {
  kGgufU8 = 0, kGgufI8 = 1, kGgufU16 = 2, kGgufI16 = 3, kGgufU32 = 4, kGgufI32 = 5, kGgufF32 = 6, kGgufBool = 7,
  kGgufString = 8, kGgufArray = 9, kGgufU64 = 10, kGgufI64 = 11, kGgufF64 = 12,
};

// ggml tensor type ids used by the tests.
enum : uint32_t {
  kTypeF32 = 0, kTypeF16 = 1, kTypeQ4_0 = 2, kTypeQ4_1 = 3, kTypeQ5_0 = 6, kTypeQ5_1 = 7, kTypeQ8_0 = 8, kTypeQ4_K = 12,
  kTypeQ6_K = 14, kTypeBF16 = 30,
};

class ByteWriter {
 public:
  template <class T>
  void put(T value) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));  // little-endian host, as the tests assume
    bytes_.insert(bytes_.end(), raw, raw + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void put_bytes(const std::vector<uint8_t>& b) { bytes_.insert(bytes_.end(), b.begin(), b.end()); }
  void pad_to(std::size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
  }
  std::size_t size() const { return bytes_.size(); }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

struct BuiltGguf {
  std::vector<uint8_t> bytes;
  // Byte offsets of fields: "version", "tensor_count", "kv_count", "kv0.key", "kv0.type", "kv0.value",
  // "tensor0.name", "tensor0.n_dims", "tensor0.dim0", "tensor0.type", "tensor0.offset", "tensor0.data", "data".
  std::map<std::string, std::size_t> at;

  template <class T>
  void patch(const std::string& field, T value, std::size_t extra = 0) {
    std::memcpy(bytes.data() + at.at(field) + extra, &value, sizeof(T));
  }
};

class GgufBuilder {
 public:
  uint32_t version = 3;

  // Scalars.
  GgufBuilder& u8(const std::string& key, uint8_t v) { return scalar(key, kGgufU8, v); }
  GgufBuilder& i8(const std::string& key, int8_t v) { return scalar(key, kGgufI8, v); }
  GgufBuilder& u16(const std::string& key, uint16_t v) { return scalar(key, kGgufU16, v); }
  GgufBuilder& i16(const std::string& key, int16_t v) { return scalar(key, kGgufI16, v); }
  GgufBuilder& u32(const std::string& key, uint32_t v) { return scalar(key, kGgufU32, v); }
  GgufBuilder& i32(const std::string& key, int32_t v) { return scalar(key, kGgufI32, v); }
  GgufBuilder& f32(const std::string& key, float v) { return scalar(key, kGgufF32, v); }
  GgufBuilder& boolean(const std::string& key, bool v) { return scalar(key, kGgufBool, static_cast<uint8_t>(v)); }
  GgufBuilder& u64(const std::string& key, uint64_t v) { return scalar(key, kGgufU64, v); }
  GgufBuilder& i64(const std::string& key, int64_t v) { return scalar(key, kGgufI64, v); }
  GgufBuilder& f64(const std::string& key, double v) { return scalar(key, kGgufF64, v); }
  GgufBuilder& str(const std::string& key, const std::string& v) {
    ByteWriter w;
    w.put_string(v);
    return raw_kv(key, kGgufString, w.bytes());
  }

  // Arrays of scalars of any type, and of strings.
  template <class T>
  GgufBuilder& array(const std::string& key, uint32_t element_type, const std::vector<T>& values) {
    ByteWriter w;
    w.put<uint32_t>(element_type);
    w.put<uint64_t>(values.size());
    for (const T& v : values) w.put<T>(v);
    return raw_kv(key, kGgufArray, w.bytes());
  }
  GgufBuilder& string_array(const std::string& key, const std::vector<std::string>& values) {
    ByteWriter w;
    w.put<uint32_t>(kGgufString);
    w.put<uint64_t>(values.size());
    for (const auto& v : values) w.put_string(v);
    return raw_kv(key, kGgufArray, w.bytes());
  }

  // A key with an arbitrary type id and pre-encoded value bytes (for malformed values).
  GgufBuilder& raw_kv(const std::string& key, uint32_t type, const std::vector<uint8_t>& value) {
    kvs_.push_back({key, type, value});
    return *this;
  }

  // Lays tensor data out at multiples of `alignment` and records it as general.alignment.
  GgufBuilder& alignment(uint32_t a) {
    alignment_ = a;
    return u32("general.alignment", a);
  }

  GgufBuilder& tensor(const std::string& name, const std::vector<uint64_t>& shape, uint32_t type,
                      const std::vector<uint8_t>& data) {
    tensors_.push_back({name, shape, type, data});
    return *this;
  }

  BuiltGguf build() const {
    BuiltGguf out;
    ByteWriter w;
    w.put_bytes({'G', 'G', 'U', 'F'});
    out.at["version"] = w.size();
    w.put<uint32_t>(version);
    out.at["tensor_count"] = w.size();
    w.put<uint64_t>(tensors_.size());
    out.at["kv_count"] = w.size();
    w.put<uint64_t>(kvs_.size());
    for (std::size_t i = 0; i < kvs_.size(); ++i) {
      const std::string id = "kv" + std::to_string(i);
      out.at[id + ".key"] = w.size();
      w.put_string(kvs_[i].key);
      out.at[id + ".type"] = w.size();
      w.put<uint32_t>(kvs_[i].type);
      out.at[id + ".value"] = w.size();
      w.put_bytes(kvs_[i].value);
    }
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& t : tensors_) {
      offsets.push_back(next);
      next += t.data.size();
      next += (alignment_ - next % alignment_) % alignment_;
    }
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const std::string id = "tensor" + std::to_string(i);
      out.at[id + ".name"] = w.size();
      w.put_string(tensors_[i].name);
      out.at[id + ".n_dims"] = w.size();
      w.put<uint32_t>(static_cast<uint32_t>(tensors_[i].shape.size()));
      for (std::size_t d = 0; d < tensors_[i].shape.size(); ++d) {
        out.at[id + ".dim" + std::to_string(d)] = w.size();
        w.put<uint64_t>(tensors_[i].shape[d]);
      }
      out.at[id + ".type"] = w.size();
      w.put<uint32_t>(tensors_[i].type);
      out.at[id + ".offset"] = w.size();
      w.put<uint64_t>(offsets[i]);
    }
    w.pad_to(alignment_);
    out.at["data"] = w.size();
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      out.at["tensor" + std::to_string(i) + ".data"] = w.size();
      w.put_bytes(tensors_[i].data);
      if (i + 1 < tensors_.size()) w.pad_to(alignment_);
    }
    out.bytes = std::move(w.bytes());
    return out;
  }

 private:
  template <class T>
  GgufBuilder& scalar(const std::string& key, uint32_t type, T v) {
    ByteWriter w;
    w.put<T>(v);
    return raw_kv(key, type, w.bytes());
  }

  struct Kv {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> value;
  };
  struct Tensor {
    std::string name;
    std::vector<uint64_t> shape;
    uint32_t type;
    std::vector<uint8_t> data;
  };
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
  uint64_t alignment_ = 32;
};

// Bytes of an F32 tensor holding `values`.
inline std::vector<uint8_t> f32_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// Shape of the small llama model the tests build.
struct TinyLlama {
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int dim = 64;  // head_dim 16
  int ffn = 96;
  int vocab = 40;
  bool tied = true;
  uint32_t matrix_type = kTypeQ4_1;
  uint32_t embedding_type = kTypeQ8_0;
  uint32_t norm_type = kTypeF32;
};

// Bytes of a tensor of `elements` values of `type` with deterministic content. Scale fields of block types
// hold small finite halves so that dequantized values are finite.
inline std::vector<uint8_t> tensor_bytes(uint32_t type, uint64_t elements, uint32_t seed) {
  uint64_t block_elements = 1, block_bytes = 4;
  std::vector<std::size_t> half_fields;
  switch (type) {
    case kTypeF32: block_bytes = 4; break;
    case kTypeF16: case kTypeBF16: block_bytes = 2; break;
    case kTypeQ4_0: block_elements = 32; block_bytes = 18; half_fields = {0}; break;
    case kTypeQ4_1: block_elements = 32; block_bytes = 20; half_fields = {0, 2}; break;
    case kTypeQ5_0: block_elements = 32; block_bytes = 22; half_fields = {0}; break;
    case kTypeQ5_1: block_elements = 32; block_bytes = 24; half_fields = {0, 2}; break;
    case kTypeQ8_0: block_elements = 32; block_bytes = 34; half_fields = {0}; break;
    case kTypeQ4_K: block_elements = 256; block_bytes = 144; half_fields = {0, 2}; break;
    case kTypeQ6_K: block_elements = 256; block_bytes = 210; half_fields = {208}; break;
    default: break;
  }
  const uint64_t blocks = elements / block_elements;
  std::vector<uint8_t> bytes(blocks * block_bytes);
  uint32_t state = seed * 2654435761u + 12345u;
  for (auto& b : bytes) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(state >> 24);
  }
  if (type == kTypeF32)
    for (uint64_t i = 0; i < elements; ++i) {
      const float v = 1.0f + 0.01f * static_cast<float>((i + seed) % 17);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  if (type == kTypeF16 || type == kTypeBF16)
    for (uint64_t i = 0; i < elements; ++i) bytes[2 * i + 1] = type == kTypeF16 ? 0x3C : 0x3F;  // near 1.0
  for (uint64_t b = 0; b < blocks; ++b)
    for (std::size_t field : half_fields) {
      bytes[b * block_bytes + field] = static_cast<uint8_t>(b);
      bytes[b * block_bytes + field + 1] = 0x20;  // about 0.008
    }
  return bytes;
}

// Metadata and tensors of a complete llama model with the given shape.
inline GgufBuilder tiny_llama_builder(const TinyLlama& m = {}) {
  GgufBuilder b;
  b.str("general.architecture", "llama")
      .str("general.name", "tiny test llama")
      .u32("llama.block_count", static_cast<uint32_t>(m.layers))
      .u32("llama.context_length", 256)
      .u32("llama.embedding_length", static_cast<uint32_t>(m.dim))
      .u32("llama.feed_forward_length", static_cast<uint32_t>(m.ffn))
      .u32("llama.attention.head_count", static_cast<uint32_t>(m.heads))
      .u32("llama.attention.head_count_kv", static_cast<uint32_t>(m.kv_heads))
      .f32("llama.rope.freq_base", 50000.0f)
      .f32("llama.attention.layer_norm_rms_epsilon", 1e-6f)
      .u32("llama.vocab_size", static_cast<uint32_t>(m.vocab));
  const auto dim = static_cast<uint64_t>(m.dim), ffn = static_cast<uint64_t>(m.ffn);
  const uint64_t head_dim = dim / static_cast<uint64_t>(m.heads);
  const uint64_t kv_dim = head_dim * static_cast<uint64_t>(m.kv_heads);
  uint32_t seed = 1;
  auto add = [&](const std::string& name, std::vector<uint64_t> shape, uint32_t type) {
    uint64_t elements = 1;
    for (uint64_t d : shape) elements *= d;
    b.tensor(name, shape, type, tensor_bytes(type, elements, seed++));
  };
  add("token_embd.weight", {dim, static_cast<uint64_t>(m.vocab)}, m.embedding_type);
  add("output_norm.weight", {dim}, m.norm_type);
  if (!m.tied) add("output.weight", {dim, static_cast<uint64_t>(m.vocab)}, m.matrix_type);
  for (int l = 0; l < m.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {dim}, m.norm_type);
    add(p + "ffn_norm.weight", {dim}, m.norm_type);
    add(p + "attn_q.weight", {dim, dim}, m.matrix_type);
    add(p + "attn_k.weight", {dim, kv_dim}, m.matrix_type);
    add(p + "attn_v.weight", {dim, kv_dim}, m.matrix_type);
    add(p + "attn_output.weight", {dim, dim}, m.matrix_type);
    add(p + "ffn_gate.weight", {dim, ffn}, m.matrix_type);
    add(p + "ffn_up.weight", {dim, ffn}, m.matrix_type);
    add(p + "ffn_down.weight", {ffn, dim}, m.matrix_type);
  }
  return b;
}

}  // namespace kvscope::test
