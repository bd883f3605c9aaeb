#pragma once
// Builds safetensors images and tiny Hugging Face Llama folders for tests, written from the format's definition
// (8-byte little-endian header length, JSON header, data), not with the reader under test.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/core/model/gguf_builder.h"  // f32_bytes
#include "tests/core/model/test_support.h"

namespace kvscope::test {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", or anything for error tests
  std::vector<uint64_t> shape;
  std::vector<uint8_t> data;
};

// Header keys in the order given (nlohmann's ordered_json), data packed in the same order.
inline std::vector<uint8_t> safetensors_image(const std::vector<SafetensorsEntry>& entries,
                                              const nlohmann::ordered_json& metadata = nullptr) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (const auto& e : entries) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.data.size()}}};
    offset += e.data.size();
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  // Sized once and filled with memcpy (GCC 12 misreads vector::insert here as an out-of-bounds move).
  std::vector<uint8_t> bytes(8 + text.size() + offset);
  const uint64_t n = text.size();
  std::memcpy(bytes.data(), &n, 8);
  std::memcpy(bytes.data() + 8, text.data(), text.size());
  std::size_t at = 8 + text.size();
  for (const auto& e : entries) {
    if (!e.data.empty()) std::memcpy(bytes.data() + at, e.data.data(), e.data.size());
    at += e.data.size();
  }
  return bytes;
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_json(const std::filesystem::path& path, const nlohmann::json& json) {
  std::ofstream(path) << json.dump(1);
}

// A 2-layer Llama with GQA (4 query heads, 2 KV heads, head_dim 4), random F32 weights, and an 8-token
// byte-level BPE vocabulary; the test changes files afterwards to provoke each error.
struct TinyHfLlama {
  int layers = 2, dim = 16, heads = 4, kv_heads = 2, ffn = 24, vocab = 8;
  nlohmann::json config() const {
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_size", dim},
            {"intermediate_size", ffn},
            {"num_hidden_layers", layers},
            {"num_attention_heads", heads},
            {"num_key_value_heads", kv_heads},
            {"max_position_embeddings", 64},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 10000.0},
            {"tie_word_embeddings", true},
            {"vocab_size", vocab},
            {"hidden_act", "silu"}};
  }
  std::vector<SafetensorsEntry> tensors(uint64_t seed = 7) const {
    Rng rng(seed);
    auto random = [&](std::vector<uint64_t> shape) {
      uint64_t n = 1;
      for (uint64_t d : shape) n *= d;
      std::vector<float> v(n);
      for (float& x : v) x = static_cast<float>(rng.uniform(-0.5, 0.5));
      return f32_bytes(v);
    };
    const uint64_t d = dim, hd = dim / heads, f = ffn;
    std::vector<SafetensorsEntry> out = {
        {"model.embed_tokens.weight", "F32", {uint64_t(vocab), d}, random({uint64_t(vocab), d})}};
    for (int l = 0; l < layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      out.push_back({p + "input_layernorm.weight", "F32", {d}, random({d})});
      out.push_back({p + "self_attn.q_proj.weight", "F32", {heads * hd, d}, random({heads * hd, d})});
      out.push_back({p + "self_attn.k_proj.weight", "F32", {kv_heads * hd, d}, random({kv_heads * hd, d})});
      out.push_back({p + "self_attn.v_proj.weight", "F32", {kv_heads * hd, d}, random({kv_heads * hd, d})});
      out.push_back({p + "self_attn.o_proj.weight", "F32", {d, heads * hd}, random({d, heads * hd})});
      out.push_back({p + "post_attention_layernorm.weight", "F32", {d}, random({d})});
      out.push_back({p + "mlp.gate_proj.weight", "F32", {f, d}, random({f, d})});
      out.push_back({p + "mlp.up_proj.weight", "F32", {f, d}, random({f, d})});
      out.push_back({p + "mlp.down_proj.weight", "F32", {d, f}, random({d, f})});
    }
    out.push_back({"model.norm.weight", "F32", {d}, random({d})});
    return out;
  }
  static nlohmann::json added_token(int id, const char* content) {
    return {{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
            {"rstrip", false},  {"normalized", false}, {"special", true}};
  }
  nlohmann::json tokenizer() const {
    const nlohmann::json byte_level = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    return {{"version", "1.0"},
            {"added_tokens",
             {added_token(6, "<|im_start|>"), added_token(7, "<|im_end|>")}},
            {"normalizer", nullptr},
            {"pre_tokenizer", byte_level},
            {"post_processor", byte_level},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"},
              {"vocab",
               {{"a", 0},
                {"b", 1},
                {"c", 2},
                {"\xC4\xA0", 3},
                {"ab", 4},
                {"\xC4\xA0"
                 "a",
                 5},
                {"<|im_start|>", 6},
                {"<|im_end|>", 7}}},
              {"merges", {"a b", "\xC4\xA0 a"}}}}};
  }
  // Writes config.json, model.safetensors, tokenizer.json and tokenizer_config.json into `dir`.
  void write(const std::filesystem::path& dir) const {
    std::filesystem::create_directories(dir);
    write_json(dir / "config.json", config());
    write_bytes(dir / "model.safetensors", safetensors_image(tensors()));
    write_json(dir / "tokenizer.json", tokenizer());
    // The class a byte-level BPE folder names (a Llama architecture alone would make transformers rebuild
    // it as a SentencePiece-style LlamaTokenizer).
    write_json(dir / "tokenizer_config.json", {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                               {"bos_token", "<|im_start|>"},
                                               {"eos_token", "<|im_end|>"}});
  }
};

}  // namespace kvscope::test
