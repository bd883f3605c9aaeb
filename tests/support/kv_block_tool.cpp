// Exposes the KV cache's block quantization to tests/python/test_block_quant.py, which compares it with the
// `gguf` package's quantizers:
//   kv_block_tool quantize TYPE HEAD_DIM < rows.f32 > out
//     appends float32 rows [n][HEAD_DIM] to a one-head CPU cache of TYPE and writes the stored rows' bytes
//     (n * row bytes) followed by the rows as the cache reads them back (float32 [n][HEAD_DIM]);
//   kv_block_tool rows OUT.f32 "PROMPT"
//     runs the default model (or $KVSCOPE_MODEL) over PROMPT with a float32 cache and writes every post-RoPE key
//     and value row at the end of the prefill to OUT.f32 as float32 [layers][kv_heads][keys, values][n][head_dim];
//     prints {"layers", "kv_heads", "entries", "head_dim"} as JSON.
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "kernels/cpu/cpu_kv_storage.h"

using namespace kvscope;

namespace {

int quantize(const std::string& type_name, int head_dim) {
  const kernels::CacheType type = kernels::parse_cache_type(type_name);
  std::vector<char> input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const std::size_t row_floats = static_cast<std::size_t>(head_dim);
  if (input.size() % (row_floats * sizeof(float)) != 0)
    throw Error("quantize: stdin holds " + std::to_string(input.size()) + " bytes, not a whole number of float32 rows of " +
                std::to_string(head_dim));
  const int n = static_cast<int>(input.size() / (row_floats * sizeof(float)));
  std::vector<float> rows(static_cast<std::size_t>(n) * row_floats);
  std::memcpy(rows.data(), input.data(), input.size());

  kernels::cpu::CpuKVStorage storage(1, 1, head_dim, type);
  std::vector<int32_t> positions(n);
  for (int i = 0; i < n; ++i) positions[i] = i;
  // Keys and values both get the rows: the key path is written out, the value path must store the same bytes.
  storage.append(0, rows.data(), rows.data(), n, positions.data());
  const std::size_t row_bytes = storage.row_bytes(kernels::KVPart::Keys);
  std::vector<uint8_t> stored(static_cast<std::size_t>(n) * row_bytes);
  for (kernels::KVPart part : {kernels::KVPart::Keys, kernels::KVPart::Values}) {
    const void* raw = type == kernels::CacheType::F32    ? static_cast<const void*>(storage.f32(0, 0, part))
                      : type == kernels::CacheType::F16  ? static_cast<const void*>(storage.f16(0, 0, part))
                      : type == kernels::CacheType::BF16 ? static_cast<const void*>(storage.bf16(0, 0, part))
                                                         : static_cast<const void*>(storage.blocks(0, 0, part));
    if (part == kernels::KVPart::Keys)
      std::memcpy(stored.data(), raw, stored.size());
    else if (n > 0 && std::memcmp(stored.data(), raw, stored.size()) != 0)
      throw Error("quantize: the values' stored bytes differ from the keys' for the same rows");
  }
  std::vector<float> back(rows.size());
  storage.read_rows(0, 0, kernels::KVPart::Keys, 0, n, back.data());
  std::fwrite(stored.data(), 1, stored.size(), stdout);
  std::fwrite(back.data(), sizeof(float), back.size(), stdout);
  return 0;
}

// Keeps the cache's rows at the end of the prefill.
class PrefillRows : public engine::RunObserver {
 public:
  void on_step_end(const engine::StepInfo& step, const cache::KVCache& cache, int, float) override {
    if (step.phase != engine::Phase::Prefill || !rows.empty()) return;
    layers = cache.n_layers();
    kv_heads = cache.n_kv_heads();
    head_dim = cache.head_dim();
    entries = cache.size(0, 0);
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < kv_heads; ++h) {
        if (cache.size(l, h) != entries) throw Error("rows: heads hold different numbers of entries");
        for (auto part : {cache.keys(l, h), cache.values(l, h)}) rows.insert(rows.end(), part.begin(), part.end());
      }
  }
  std::vector<float> rows;
  int layers = 0, kv_heads = 0, head_dim = 0, entries = 0;
};

int dump_rows(const std::string& out, const std::string& prompt) {
  const model::Model m = model::load_model(model::default_model_path());
  engine::Engine engine(m);
  engine::GenerateOptions options;
  options.max_new_tokens = 1;
  PrefillRows observer;
  engine::RunHooks hooks;
  hooks.observers = {&observer};
  engine.generate(m.tokenizer->encode_prompt(prompt), options, hooks);
  std::FILE* f = std::fopen(out.c_str(), "wb");
  if (!f) throw Error("rows: cannot write " + out);
  const std::size_t written = std::fwrite(observer.rows.data(), sizeof(float), observer.rows.size(), f);
  if (std::fclose(f) != 0 || written != observer.rows.size()) throw Error("rows: writing " + out + " failed");
  std::cout << nlohmann::json{{"layers", observer.layers},
                              {"kv_heads", observer.kv_heads},
                              {"entries", observer.entries},
                              {"head_dim", observer.head_dim}}
            << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 3 && args[0] == "quantize") return quantize(args[1], std::stoi(args[2]));
    if (args.size() == 3 && args[0] == "rows") return dump_rows(args[1], args[2]);
    std::fprintf(stderr, "usage: kv_block_tool quantize TYPE HEAD_DIM < rows.f32 | rows OUT.f32 PROMPT\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kv_block_tool: %s\n", e.what());
    return 1;
  }
}
