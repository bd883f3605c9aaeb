// load_tokenizer on small GGUF images written here byte by byte.
#include <catch2/catch.hpp>
#include <cstring>

#include "core/common/error.h"
#include "core/model/gguf.h"
#include "core/model/tokenizer.h"
#include "core/model/tokenizer_bpe.h"
#include "core/model/tokenizer_spm.h"

using namespace kvscope::model;

namespace {

// A GGUF v3 image with metadata only (no tensors).
class GgufImage {
 public:
  GgufImage& str(const std::string& key, const std::string& v) {
    return kv(key, 8, [&] { put_string(v); });
  }
  GgufImage& u32(const std::string& key, uint32_t v) {
    return kv(key, 4, [&] { put(v); });
  }
  GgufImage& boolean(const std::string& key, bool v) {
    return kv(key, 7, [&] { put(static_cast<uint8_t>(v)); });
  }
  GgufImage& strings(const std::string& key, const std::vector<std::string>& v) {
    return kv(key, 9, [&] {
      put(uint32_t{8});
      put(static_cast<uint64_t>(v.size()));
      for (const auto& s : v) put_string(s);
    });
  }
  GgufImage& i32s(const std::string& key, const std::vector<int32_t>& v) {
    return kv(key, 9, [&] {
      put(uint32_t{5});
      put(static_cast<uint64_t>(v.size()));
      for (int32_t x : v) put(x);
    });
  }
  GgufImage& f32s(const std::string& key, const std::vector<float>& v) {
    return kv(key, 9, [&] {
      put(uint32_t{6});
      put(static_cast<uint64_t>(v.size()));
      for (float x : v) put(x);
    });
  }
  GgufFile open(const std::string& name) const {
    // Byte by byte: GCC 12's -Wstringop-overflow misreads bulk copies here.
    std::vector<uint8_t> image;
    auto put_le = [&](uint64_t v, int n) {
      for (int i = 0; i < n; ++i) image.push_back(static_cast<uint8_t>(v >> (8 * i)));
    };
    put_le(0x46554747, 4);  // "GGUF"
    put_le(3, 4);           // version
    put_le(0, 8);           // tensors
    put_le(n_kv_, 8);
    for (uint8_t b : body_) image.push_back(b);
    while (image.size() % 32 != 0) image.push_back(0);
    return GgufFile::open_memory(image.data(), image.size(), name);
  }

 private:
  template <class T>
  void put(T v) {
    uint8_t bytes[sizeof v];
    std::memcpy(bytes, &v, sizeof v);
    for (uint8_t b : bytes) body_.push_back(b);
  }
  void put_string(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    for (char c : s) body_.push_back(static_cast<uint8_t>(c));
  }
  template <class F>
  GgufImage& kv(const std::string& key, uint32_t type, F value) {
    put_string(key);
    put(type);
    value();
    ++n_kv_;
    return *this;
  }
  std::vector<uint8_t> body_;
  uint64_t n_kv_ = 0;
};

// Byte-level spelling of printable ASCII is the character itself; that is all these vocabularies use.
GgufImage tiny_gpt2(const std::string& pre) {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_end|>"};
  std::vector<int32_t> types = {3, 3};
  for (char c = 'a'; c <= 'z'; ++c) {
    tokens.emplace_back(1, c);
    types.push_back(1);
  }
  tokens.push_back("he");
  types.push_back(1);
  GgufImage g;
  g.str("tokenizer.ggml.model", "gpt2")
      .str("tokenizer.ggml.pre", pre)
      .strings("tokenizer.ggml.tokens", tokens)
      .i32s("tokenizer.ggml.token_type", types)
      .strings("tokenizer.ggml.merges", {"h e"})
      .u32("tokenizer.ggml.bos_token_id", 0)
      .u32("tokenizer.ggml.eos_token_id", 1);
  return g;
}

}  // namespace

TEST_CASE("load_tokenizer builds byte-level BPE from gpt2 metadata", "[tokenizer][factory]") {
  const auto tok = load_tokenizer(tiny_gpt2("smollm").open("tiny.gguf"));
  REQUIRE(dynamic_cast<const BpeTokenizer*>(tok.get()));
  CHECK(tok->vocab_size() == 29);
  CHECK(tok->encode("hehe<|im_end|>") == std::vector<int>{28, 28, 1});
  CHECK(tok->eos_id() == 1);
  CHECK_FALSE(tok->add_bos());
  CHECK(tok->is_end_of_generation(0));
}

TEST_CASE("load_tokenizer builds SentencePiece BPE from llama metadata", "[tokenizer][factory]") {
  GgufImage g;
  g.str("tokenizer.ggml.model", "llama")
      .strings("tokenizer.ggml.tokens",
               {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "h", "i", "\xE2\x96\x81h", "\xE2\x96\x81hi"})
      .f32s("tokenizer.ggml.scores", {0, 0, 0, -1, -1, -1, -2, -3})
      .i32s("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1})
      .u32("tokenizer.ggml.bos_token_id", 1)
      .u32("tokenizer.ggml.eos_token_id", 2)
      .u32("tokenizer.ggml.unknown_token_id", 0);
  const auto tok = load_tokenizer(g.open("llama.gguf"));
  REQUIRE(dynamic_cast<const SpmTokenizer*>(tok.get()));
  CHECK(tok->add_bos());  // the default when the file does not say
  CHECK(tok->encode("hi") == std::vector<int>{7});
  CHECK(tok->decode({7}) == "hi");

  GgufImage no_prefix = g;
  no_prefix.boolean("tokenizer.ggml.add_space_prefix", false).boolean("tokenizer.ggml.add_bos_token", false);
  const auto bare = load_tokenizer(no_prefix.open("llama2.gguf"));
  CHECK_FALSE(bare->add_bos());
  CHECK(bare->encode("hi") == std::vector<int>{4, 5});
}

TEST_CASE("load_tokenizer names the file and key it cannot use", "[tokenizer][factory]") {
  GgufImage bert;
  bert.str("tokenizer.ggml.model", "bert").strings("tokenizer.ggml.tokens", {"a"});
  CHECK_THROWS_WITH(load_tokenizer(bert.open("bert.gguf")),
                    Catch::Contains("bert.gguf") && Catch::Contains("tokenizer.ggml.model") && Catch::Contains("bert"));
  CHECK_THROWS_WITH(load_tokenizer(tiny_gpt2("mystery").open("pre.gguf")),
                    Catch::Contains("pre.gguf") && Catch::Contains("tokenizer.ggml.pre") && Catch::Contains("mystery"));
  GgufImage none;
  none.str("general.architecture", "llama");
  CHECK_THROWS_WITH(load_tokenizer(none.open("none.gguf")),
                    Catch::Contains("none.gguf") && Catch::Contains("tokenizer.ggml.model"));
  GgufImage bad_eos = tiny_gpt2("gpt2");
  bad_eos.u32("tokenizer.ggml.unknown_token_id", 999);
  CHECK_THROWS_WITH(load_tokenizer(bad_eos.open("eos.gguf")),
                    Catch::Contains("eos.gguf") && Catch::Contains("unknown_token_id"));
}
