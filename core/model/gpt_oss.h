#pragma once
// gpt-oss (GptOssForCausalLM; GGUF `gpt-oss`): what it adds to a mixture-of-experts Llama layer, set on
// kernels::ModelShape's gpt-oss fields by the readers of both formats. A learned sink logit per head in every
// softmax's denominator, sliding-window layers alternating with global ones, q/k/v/o biases, YaRN rope scaling,
// a router with a bias that picks the k largest logits and weighs them by a softmax over those k, expert biases,
// and the clamped SwiGLU (up + 1) * g * sigmoid(alpha g).
#include <memory>
#include <vector>

#include "core/model/config.h"
#include "core/model/weights.h"

namespace kvscope::model {

class JsonConfigReader;

// The gpt-oss fields of a config.json (core/model/hf_gpt_oss.cpp), after the Llama and expert fields were read.
void read_gpt_oss_fields(const JsonConfigReader& reader, ModelConfig& config);
// The same from a GGUF file's gpt-oss metadata, as llama.cpp writes and reads it.
void read_gpt_oss_fields(const GgufFile& file, ModelConfig& config);

// What every gpt-oss checkpoint has, whatever its config says.
void apply_gpt_oss_architecture(ModelConfig& config);

// A folder's experts into `weights`: transformers stores them for x @ W (gate_up_proj [E][hidden][2I] with gate and
// up columns interleaved, down_proj [E][I][hidden]) and their biases interleaved the same way; kvscope's matrices
// are W[rows][cols] for W x, so each is laid out anew in float32 (ModelWeights::repacked). A layer whose experts
// are MXFP4 (gate_up_proj_blocks / _scales, down_proj_blocks / _scales, as the released folders ship them; already
// W[rows][cols], gate and up rows interleaved) keeps them in MXFP4, each block rewritten in ggml's nibble order.
// Throws Error naming the file and tensor when one is missing, misshapen or of the wrong dtype, or when a block
// tensor lacks its scales.
void bind_gpt_oss_folder_experts(const HfFolder& folder, const ModelConfig& config, ModelWeights& weights);

}  // namespace kvscope::model
