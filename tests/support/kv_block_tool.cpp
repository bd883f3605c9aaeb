// Exposes the KV cache's block quantization to tests/python/test_block_quant.py, which compares it with the
// `gguf` package's quantizers:
//   kv_block_tool quantize TYPE HEAD_DIM < rows.f32 > out
//     appends float32 rows [n][HEAD_DIM] to a one-head CPU cache of TYPE (a cache type spec, e.g. q4_0 or
//     q4_0:rot=hadamard) and writes the stored keys' bytes (n * row bytes) followed by the keys as the cache reads
//     them back (float32 [n][HEAD_DIM]); then on stderr one JSON line {"keys_nmse", "values_nmse"}, the storage
//     error the cache recorded (what traces write as storage_nmse_keys/values);
//   kv_block_tool kivi SPEC HEAD_DIM PREFILL KEEP < keys.f32 values.f32
//     (tests/python/test_kivi_cache.py) reads n key rows then n value rows (float32 [n][HEAD_DIM] each), appends
//     the first PREFILL to a one-head CPU cache of SPEC (e.g. kivi2:group=8,residual=16) at once, keeps the
//     entries KEEP (comma-separated indices, or "all"), appends the rest one at a time, and writes one JSON line
//     {"size", "key_bytes", "value_bytes", "allocated"} followed by the keys and the values as the cache reads them
//     back (float32 [size][HEAD_DIM] each);
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

int quantize(const std::string& spec, int head_dim) {
  const kernels::KVCacheTypes types = kernels::parse_cache_types(spec);
  const kernels::CacheType type = types.keys;
  std::vector<char> input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const std::size_t row_floats = static_cast<std::size_t>(head_dim);
  if (input.size() % (row_floats * sizeof(float)) != 0)
    throw Error("quantize: stdin holds " + std::to_string(input.size()) + " bytes, not a whole number of float32 rows of " +
                std::to_string(head_dim));
  const int n = static_cast<int>(input.size() / (row_floats * sizeof(float)));
  std::vector<float> rows(static_cast<std::size_t>(n) * row_floats);
  std::memcpy(rows.data(), input.data(), input.size());

  kernels::cpu::CpuKVStorage storage(1, 1, head_dim, types);
  std::vector<int32_t> positions(n);
  for (int i = 0; i < n; ++i) positions[i] = i;
  // Keys and values both get the rows: the key path is written out, the value path must store the same bytes
  // (unless the two parts rotate in different blocks).
  const bool same_frame =
      storage.rotation_block(kernels::KVPart::Keys) == storage.rotation_block(kernels::KVPart::Values);
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
    else if (same_frame && n > 0 && std::memcmp(stored.data(), raw, stored.size()) != 0)
      throw Error("quantize: the values' stored bytes differ from the keys' for the same rows");
  }
  std::vector<float> back(rows.size());
  storage.read_rows(0, 0, kernels::KVPart::Keys, 0, n, back.data());
  std::fwrite(stored.data(), 1, stored.size(), stdout);
  std::fwrite(back.data(), sizeof(float), back.size(), stdout);
  std::cerr << nlohmann::json{{"keys_nmse", storage.storage_error(0, kernels::KVPart::Keys, false).relative_nmse()},
                              {"values_nmse", storage.storage_error(0, kernels::KVPart::Values, false).relative_nmse()}}
            << "\n";
  return 0;
}

int kivi(const std::string& spec, int head_dim, int prefill, const std::string& keep_list) {
  std::vector<char> input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const std::size_t d = static_cast<std::size_t>(head_dim), pair_bytes = 2 * d * sizeof(float);
  if (input.size() % pair_bytes != 0)
    throw Error("kivi: stdin holds " + std::to_string(input.size()) + " bytes, not n key rows and n value rows of " +
                std::to_string(head_dim));
  const int n = static_cast<int>(input.size() / pair_bytes);
  if (prefill < 1 || prefill > n) throw Error("kivi: PREFILL " + std::to_string(prefill) + " not in [1, " + std::to_string(n) + "]");
  std::vector<float> keys(static_cast<std::size_t>(n) * d), values(keys.size());
  std::memcpy(keys.data(), input.data(), keys.size() * sizeof(float));
  std::memcpy(values.data(), input.data() + keys.size() * sizeof(float), values.size() * sizeof(float));

  kernels::cpu::CpuKVStorage storage(1, 1, head_dim, kernels::parse_cache_types(spec));
  std::vector<int32_t> positions(n);
  for (int i = 0; i < n; ++i) positions[i] = i;
  storage.append(0, keys.data(), values.data(), prefill, positions.data());
  if (keep_list != "all") {
    std::vector<int32_t> keep;
    std::size_t at = 0;
    while (at < keep_list.size()) {
      const std::size_t comma = keep_list.find(',', at);
      keep.push_back(std::stoi(keep_list.substr(at, comma - at)));
      at = comma == std::string::npos ? keep_list.size() : comma + 1;
    }
    storage.edit(0, 0, keep, {}, {});
  }
  for (int i = prefill; i < n; ++i)
    storage.append(0, keys.data() + i * d, values.data() + i * d, 1, positions.data() + i);
  const int size = storage.size(0, 0);
  std::vector<float> back_keys(static_cast<std::size_t>(size) * d), back_values(back_keys.size());
  storage.read_rows(0, 0, kernels::KVPart::Keys, 0, size, back_keys.data());
  storage.read_rows(0, 0, kernels::KVPart::Values, 0, size, back_values.data());
  auto part_bytes = [&](kernels::KVPart part) {
    return kernels::is_kivi(storage.type().of(part)) ? storage.kivi(0, 0, part).entry_bytes()
                                                     : size * storage.row_bytes(part);
  };
  std::cout << nlohmann::json{{"size", size},
                              {"key_bytes", part_bytes(kernels::KVPart::Keys)},
                              {"value_bytes", part_bytes(kernels::KVPart::Values)},
                              {"entry_bytes", storage.entry_bytes(0, 0)},
                              {"allocated", storage.layer_bytes(0)}}
            << "\n"
            << std::flush;
  std::fwrite(back_keys.data(), sizeof(float), back_keys.size(), stdout);
  std::fwrite(back_values.data(), sizeof(float), back_values.size(), stdout);
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
    if (args.size() == 5 && args[0] == "kivi") return kivi(args[1], std::stoi(args[2]), std::stoi(args[3]), args[4]);
    std::fprintf(stderr,
                 "usage: kv_block_tool quantize TYPE HEAD_DIM < rows.f32 | kivi SPEC HEAD_DIM PREFILL KEEP < rows.f32 | "
                 "rows OUT.f32 PROMPT\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kv_block_tool: %s\n", e.what());
    return 1;
  }
}
