// kvscope info: describe a model (GGUF file or Hugging Face folder) without running it: format, architecture,
// hyperparameters, weight types and sizes, tokenizer kind, the chat template --chat renders, and the CUDA
// devices this process can use.
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "app/subcommands.h"
#include "core/model/chat_template.h"
#include "core/model/config.h"
#include "core/model/gguf.h"
#include "core/model/hf_folder.h"
#include "core/model/model.h"
#include "core/model/tokenizer_transformers.h"
#include "kernels/cuda/cuda_device.h"

namespace kvscope::app {
namespace {

struct InfoArgs {
  std::string model_path;
  bool json = false;
  bool devices_only = false;
};

struct TypeUsage {
  int tensors = 0;
  uint64_t bytes = 0;
};

// What info reports, gathered the same way for both formats.
struct ModelSummary {
  std::string path;
  std::string format;  // "GGUF v3", "Hugging Face safetensors (2 shards)"
  model::ModelConfig config;
  uint64_t file_bytes = 0;                 // the GGUF file, or the folder's defining files
  std::map<std::string, TypeUsage> types;  // keyed by type name so that the listing is stable
  std::size_t tensor_count = 0;
  std::string tokenizer;
  std::string chat_template;
};

// "Jinja2 template in chat_template.jinja; it reads date_string, enable_thinking": the variables are what
// --template-arg, --chat-date and --no-think can set.
std::string chat_template_line(const model::ChatTemplateChoice& choice) {
  if (!choice.chat_template) return choice.description;
  try {
    const auto vars = model::chat_template_variables(*choice.chat_template);
    std::string list;
    for (const auto& v : vars) list += (list.empty() ? "" : ", ") + v;
    return choice.description + "; it reads " + (list.empty() ? "no variables of its own" : list);
  } catch (const std::exception& e) {
    return choice.description + " (" + e.what() + ")";
  }
}

ModelSummary summarize_gguf(const std::filesystem::path& path) {
  const model::GgufFile file = model::GgufFile::open(path);
  ModelSummary s;
  s.path = file.path().string();
  s.format = "GGUF v" + std::to_string(file.version());
  s.config = model::read_config(file);
  s.file_bytes = file.file_size();
  for (const auto& tensor : file.tensors()) {
    TypeUsage& entry = s.types[model::ggml_type_name(static_cast<uint32_t>(tensor.type))];
    ++entry.tensors;
    entry.bytes += tensor.n_bytes;
  }
  s.tensor_count = file.tensors().size();
  const std::string pre = file.get_string("tokenizer.ggml.pre", "");
  s.tokenizer = file.get_string("tokenizer.ggml.model", "none") + (pre.empty() ? "" : " (pre-tokenizer " + pre + ")");
  const auto tokenizer = model::load_tokenizer(file);
  s.chat_template = chat_template_line(model::choose_chat_template(model::read_chat_template(file), *tokenizer));
  return s;
}

ModelSummary summarize_hf(const std::filesystem::path& path) {
  const model::HfFolder folder = model::HfFolder::open(path);
  ModelSummary s;
  s.path = folder.dir().string();
  const std::size_t shards = folder.shards().size();
  s.format = "Hugging Face safetensors (" + std::to_string(shards) + (shards == 1 ? " file)" : " shards)");
  s.config = model::read_config(folder);
  for (const auto& file : folder.defining_files()) s.file_bytes += std::filesystem::file_size(file);
  for (const auto& shard : folder.shards())
    for (const auto& tensor : shard.tensors()) {
      TypeUsage& entry = s.types[tensor.dtype];
      ++entry.tensors;
      entry.bytes += tensor.n_bytes;
      ++s.tensor_count;
    }
  const model::LoadedTokenizer tokenizer = model::load_transformers_tokenizer(path);
  s.tokenizer = tokenizer.description;
  s.chat_template = chat_template_line(model::choose_chat_template(model::read_chat_template(path), *tokenizer.tokenizer));
  return s;
}

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

nlohmann::json info_json(const ModelSummary& s) {
  const model::ModelConfig& c = s.config;
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [name, usage] : s.types) types[name] = {{"tensors", usage.tensors}, {"bytes", usage.bytes}};
  nlohmann::json j = {{"path", s.path},
                      {"format", s.format},
                      {"file_size", s.file_bytes},
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
                      {"rope_style", c.rope_style == model::RopeStyle::HalfSplit ? "rotate-half" : "adjacent-pairs"},
                      {"rms_eps", c.rms_eps},
                      {"tied_embeddings", c.tied_embeddings},
                      {"tokenizer", s.tokenizer},
                      {"chat_template", s.chat_template},
                      {"tensor_count", s.tensor_count},
                      {"tensor_types", types}};
  if (c.n_experts > 0) {
    j["n_experts"] = c.n_experts;
    j["n_experts_used"] = c.n_experts_used;
    j["expert_weights_norm"] = c.expert_weights_norm;
  }
  if (c.rope_scaling.type != "default") j["rope_scaling"] = c.rope_scaling.type;
  return j;
}

std::string cuda_version(int v) { return v > 0 ? std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) : "none"; }

nlohmann::json devices_json(const kernels::cuda::CudaDeviceList& list) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : list.devices)
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"total_memory", d.total_memory},
                       {"free_memory", d.free_memory},
                       {"compute_capability", std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor)},
                       {"multiprocessors", d.multiprocessors}});
  return {{"built_with_cuda", list.built_with_cuda},
          {"runtime_version", cuda_version(list.runtime_version)},
          {"driver_version", cuda_version(list.driver_version)},
          {"devices", devices},
          {"why_none", list.why_none}};
}

void print_devices(const kernels::cuda::CudaDeviceList& list) {
  if (list.devices.empty()) {
    std::printf("cuda devices    none: %s\n", list.why_none.c_str());
    return;
  }
  std::printf("cuda devices    %zu (runtime %s, driver %s)\n", list.devices.size(),
              cuda_version(list.runtime_version).c_str(), cuda_version(list.driver_version).c_str());
  for (const auto& d : list.devices)
    std::printf("  %d: %s, %s total (%s free), compute capability %d.%d, %d SMs\n", d.index, d.name.c_str(),
                mib(d.total_memory).c_str(), mib(d.free_memory).c_str(), d.compute_major, d.compute_minor,
                d.multiprocessors);
}

void print_text(const ModelSummary& s) {
  const model::ModelConfig& c = s.config;
  std::printf("model           %s\n", s.path.c_str());
  std::printf("format          %s\n", s.format.c_str());
  std::printf("size            %llu bytes (%s)\n", static_cast<unsigned long long>(s.file_bytes),
              mib(s.file_bytes).c_str());
  std::printf("architecture    %s\n", c.architecture.c_str());
  std::printf("name            %s\n", c.name.c_str());
  std::printf("layers          %d\n", c.n_layers);
  std::printf("heads           %d query, %d key/value (group size %d)\n", c.n_heads, c.n_kv_heads, c.group_size());
  std::printf("dims            embedding %d, head %d\n", c.dim, c.head_dim);
  std::printf("ffn             %d%s\n", c.ffn_dim, c.n_experts > 0 ? " per expert" : "");
  if (c.n_experts > 0)
    std::printf("experts         %d, %d per token (%s)\n", c.n_experts, c.n_experts_used,
                c.router_softmax_after_topk ? "softmax over the chosen logits"
                : c.expert_weights_norm     ? "renormalised"
                                            : "softmax probabilities");
  std::printf("vocab           %d\n", c.vocab_size);
  std::printf("context length  %d\n", c.context_length);
  std::printf("rope            base %g, %d dims per head, %s\n", static_cast<double>(c.rope_base), c.rope_dim,
              c.rope_style == model::RopeStyle::HalfSplit ? "rotate-half" : "adjacent pairs");
  if (c.rope_scaling.type == "longrope")
    std::printf("rope scaling    longrope: long factors past %d positions, attention factor %g\n", c.rope_long_after,
                static_cast<double>(c.rope_attention_factor));
  else if (c.rope_scaling.type != "default")
    std::printf("rope scaling    %s\n", c.rope_scaling.type.c_str());
  std::printf("rms eps         %g\n", static_cast<double>(c.rms_eps));
  if (c.local_layer_count() > 0) {
    std::string local;
    for (int l = 0; l < c.n_layers; ++l)
      if (c.is_local(l)) local += (local.empty() ? "" : " ") + std::to_string(l);
    std::printf("sliding window  %d tokens on %d of %d layers (%s)%s\n", c.sliding_window, c.local_layer_count(),
                c.n_layers, local.c_str(),
                c.rope_local_base > 0.0f ? (", local rope base " + std::to_string(static_cast<int>(c.rope_local_base))).c_str()
                                         : "");
  }
  if (c.attn_logit_softcap > 0.0f || c.final_logit_softcap > 0.0f)
    std::printf("soft-caps       attention %g, logits %g\n", static_cast<double>(c.attn_logit_softcap),
                static_cast<double>(c.final_logit_softcap));
  if (c.attention_sinks) std::printf("attention sinks a learned logit per head in every softmax (gpt-oss)\n");
  if (c.swiglu_limit > 0.0f)
    std::printf("experts' SwiGLU clamped at %g, alpha %g, with biases\n", static_cast<double>(c.swiglu_limit),
                static_cast<double>(c.swiglu_alpha));
  std::printf("tied embeddings %s\n", c.tied_embeddings ? "yes" : "no");
  std::printf("tokenizer       %s\n", s.tokenizer.c_str());
  std::printf("chat template   %s\n", s.chat_template.c_str());
  std::printf("tensors         %zu\n", s.tensor_count);
  for (const auto& [name, usage] : s.types)
    std::printf("  %-8s %4d tensors %12llu bytes (%s)\n", name.c_str(), usage.tensors,
                static_cast<unsigned long long>(usage.bytes), mib(usage.bytes).c_str());
}

}  // namespace

Command register_info(CLI::App& root) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* cmd = root.add_subcommand("info", "describe a model (format, architecture, sizes, weight types, tokenizer) and the CUDA devices");
  cmd->add_option("--model", args->model_path,
                  "GGUF file or Hugging Face folder (default: $KVSCOPE_MODEL, then SmolLM2-135M-Instruct)");
  cmd->add_flag("--json", args->json, "print a JSON object instead of text");
  cmd->add_flag("--devices", args->devices_only,
                "list the CUDA devices only (no model is read: for a GPU machine before a model is there)")
      ->excludes(cmd->get_option("--model"));
  return {cmd, [args] {
            if (args->devices_only) {
              const kernels::cuda::CudaDeviceList devices = kernels::cuda::list_cuda_devices();
              if (args->json)
                std::printf("%s\n", nlohmann::json{{"cuda", devices_json(devices)}}.dump(2).c_str());
              else
                print_devices(devices);
              return 0;
            }
            const auto path = model::resolve_model_path(args->model_path);
            std::error_code ec;
            const ModelSummary summary =
                std::filesystem::is_directory(path, ec) ? summarize_hf(path) : summarize_gguf(path);
            const kernels::cuda::CudaDeviceList devices = kernels::cuda::list_cuda_devices();
            if (args->json) {
              nlohmann::json j = info_json(summary);
              j["cuda"] = devices_json(devices);
              std::printf("%s\n", j.dump(2).c_str());
            } else {
              print_text(summary);
              print_devices(devices);
            }
            return 0;
          }};
}

}  // namespace kvscope::app
