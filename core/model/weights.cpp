#include "core/model/weights.h"

#include <string>

#include "core/common/error.h"
#include "core/common/shape_text.h"
#include "core/model/config.h"
#include "core/model/gguf.h"
#include "core/model/weight_binding.h"
#include "kernels/common/dequantize.h"

namespace kvscope::model {
namespace {

[[noreturn]] void tensor_error(const GgufFile& file, const GgufTensorInfo& info, const std::string& what) {
  throw Error(file.path().string() + ": tensor '" + info.name + "' " + what);
}

std::string supported_types() {
  std::string list;
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeTraits* traits = ggml_type_traits(id);
    if (traits && traits->supported) list += (list.empty() ? "" : ", ") + std::string(traits->name);
  }
  return list;
}

void check_supported_type(const GgufFile& file, const GgufTensorInfo& info) {
  const GgmlTypeTraits* traits = ggml_type_traits(static_cast<uint32_t>(info.type));
  if (!traits || !traits->supported)
    tensor_error(file, info, "type: " + ggml_type_name(static_cast<uint32_t>(info.type)) +
                                 " is not supported (supported: " + supported_types() + ")");
}

// GGUF lists the contiguous dimension first: shape [ne0, ne1] is a row-major matrix of ne1 rows of ne0 values.
QuantMatrix bind_matrix(const GgufFile& file, const std::string& name, int rows, int cols) {
  const GgufTensorInfo& info = file.tensor(name);
  const bool matches = info.shape.size() == 2 && info.shape[0] == static_cast<uint64_t>(cols) &&
                       info.shape[1] == static_cast<uint64_t>(rows);
  if (!matches)
    tensor_error(file, info, "shape: " + shape_text(info.shape) + " (expected [" + std::to_string(cols) + ", " +
                                 std::to_string(rows) + "] for " + std::to_string(rows) + " rows of " +
                                 std::to_string(cols) + " values)");
  check_supported_type(file, info);
  return QuantMatrix::view(info.type, rows, cols, info.data);
}

std::vector<float> bind_vector(const GgufFile& file, const std::string& name, int length) {
  const GgufTensorInfo& info = file.tensor(name);
  if (info.shape.size() != 1 || info.shape[0] != static_cast<uint64_t>(length))
    tensor_error(file, info, "shape: " + shape_text(info.shape) + " (expected [" + std::to_string(length) + "])");
  if (info.type != GgmlType::F32 && info.type != GgmlType::F16 && info.type != GgmlType::BF16)
    tensor_error(file, info, "type: " + ggml_type_name(static_cast<uint32_t>(info.type)) +
                                 " is not supported for a norm vector (expected F32, F16 or BF16)");
  std::vector<float> values(static_cast<std::size_t>(length));
  kernels::dequantize_row(info.type, info.data, values.data(), length);
  return values;
}

// llama.cpp's merged expert tensors: shape [cols, rows, n_experts] (ne0 contiguous), expert e's rows x cols
// matrix at e * rows rows.
std::vector<QuantMatrix> bind_experts(const GgufFile& file, const std::string& name, int n_experts, int rows,
                                      int cols) {
  const GgufTensorInfo& info = file.tensor(name);
  const std::vector<uint64_t> expected = {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows),
                                          static_cast<uint64_t>(n_experts)};
  if (info.shape != expected)
    tensor_error(file, info,
                 "shape: " + shape_text(info.shape) + " (expected " + shape_text(expected) + " for " +
                     std::to_string(n_experts) + " experts of " + std::to_string(rows) + " rows of " +
                     std::to_string(cols) + " values)");
  check_supported_type(file, info);
  return split_experts(QuantMatrix::view(info.type, rows * n_experts, cols, info.data), n_experts);
}

}  // namespace

ModelWeights bind_weights(const GgufFile& file, const ModelConfig& config) {
  const auto matrix = [&](const std::string& name, int rows, int cols) { return bind_matrix(file, name, rows, cols); };
  const auto vector = [&](const std::string& name, int length) { return bind_vector(file, name, length); };
  const auto experts = [&](const std::string& name, int n_experts, int rows, int cols) {
    return bind_experts(file, name, n_experts, rows, cols);
  };
  // llama.cpp leaves output.weight out when the head is tied to the embedding.
  return bind_model({"token_embd.weight", "output_norm.weight", "output.weight", gguf_layer_names}, config,
                    file.find_tensor("output.weight") != nullptr, matrix, vector, experts);
}

}  // namespace kvscope::model
