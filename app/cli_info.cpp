// kvscope info: describe a model file (hyperparameters and tensor inventory) without running it.
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "app/subcommands.h"
#include "core/model/config.h"
#include "core/model/gguf.h"
#include "core/model/model.h"

namespace kvscope::app {
namespace {

struct InfoArgs {
  std::string model_path;
  bool json = false;
};

struct TypeUsage {
  int tensors = 0;
  uint64_t bytes = 0;
};

// Keyed by type name so that the listing is stable and readable.
std::map<std::string, TypeUsage> tensor_types(const model::GgufFile& file) {
  std::map<std::string, TypeUsage> usage;
  for (const auto& tensor : file.tensors()) {
    TypeUsage& entry = usage[model::ggml_type_name(static_cast<uint32_t>(tensor.type))];
    ++entry.tensors;
    entry.bytes += tensor.n_bytes;
  }
  return usage;
}

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

nlohmann::json info_json(const model::GgufFile& file, const model::ModelConfig& c) {
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [name, usage] : tensor_types(file)) types[name] = {{"tensors", usage.tensors}, {"bytes", usage.bytes}};
  return {{"path", file.path().string()},
          {"file_size", file.file_size()},
          {"gguf_version", file.version()},
          {"architecture", c.architecture},
          {"name", c.name},
          {"n_layers", c.n_layers},
          {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads},
          {"dim", c.dim},
          {"head_dim", c.head_dim},
          {"ffn_dim", c.ffn_dim},
          {"vocab_size", c.vocab_size},
          {"context_length", c.context_length},
          {"rope_base", c.rope_base},
          {"rope_dim", c.rope_dim},
          {"rms_eps", c.rms_eps},
          {"tied_embeddings", c.tied_embeddings},
          {"tensor_count", file.tensors().size()},
          {"tensor_types", types}};
}

void print_text(const model::GgufFile& file, const model::ModelConfig& c) {
  std::printf("file            %s\n", file.path().string().c_str());
  std::printf("file size       %llu bytes (%s), GGUF v%u\n", static_cast<unsigned long long>(file.file_size()),
              mib(file.file_size()).c_str(), file.version());
  std::printf("architecture    %s\n", c.architecture.c_str());
  std::printf("name            %s\n", c.name.c_str());
  std::printf("layers          %d\n", c.n_layers);
  std::printf("heads           %d query, %d key/value (group size %d)\n", c.n_heads, c.n_kv_heads, c.group_size());
  std::printf("dims            embedding %d, head %d\n", c.dim, c.head_dim);
  std::printf("ffn             %d\n", c.ffn_dim);
  std::printf("vocab           %d\n", c.vocab_size);
  std::printf("context length  %d\n", c.context_length);
  std::printf("rope            base %g, %d dims per head\n", static_cast<double>(c.rope_base), c.rope_dim);
  std::printf("rms eps         %g\n", static_cast<double>(c.rms_eps));
  std::printf("tied embeddings %s\n", c.tied_embeddings ? "yes" : "no");
  std::printf("tensors         %zu\n", file.tensors().size());
  for (const auto& [name, usage] : tensor_types(file))
    std::printf("  %-8s %4d tensors %12llu bytes (%s)\n", name.c_str(), usage.tensors,
                static_cast<unsigned long long>(usage.bytes), mib(usage.bytes).c_str());
}

}  // namespace

Command register_info(CLI::App& root) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* cmd = root.add_subcommand("info", "describe a model file: hyperparameters and tensor types");
  cmd->add_option("--model", args->model_path, "GGUF model file (default: $KVSCOPE_MODEL, then SmolLM2-135M-Instruct)");
  cmd->add_flag("--json", args->json, "print a JSON object instead of text");
  return {cmd, [args] {
            const model::GgufFile file = model::GgufFile::open(model::resolve_model_path(args->model_path));
            const model::ModelConfig config = model::read_config(file);
            if (args->json)
              std::printf("%s\n", info_json(file, config).dump(2).c_str());
            else
              print_text(file, config);
            return 0;
          }};
}

}  // namespace kvscope::app
