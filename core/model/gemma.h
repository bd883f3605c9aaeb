#pragma once
// Gemma 2 and Gemma 3 (text): what they add to a Llama layer, set on kernels::ModelShape's Gemma fields by the
// readers of both formats. GeGLU feed-forward, the embedding scaled by sqrt(dim), RMSNorm of each sub-layer's
// output before its residual add, query_pre_attn_scalar instead of head_dim in the score's scale, soft-capped
// attention and output logits (Gemma 2), and sliding-window ("local") layers between global ones: every other
// layer in Gemma 2, five local to one global in Gemma 3, whose local layers use another RoPE base and no rope
// scaling.
#include <vector>

#include "core/model/config.h"

namespace kvscope::model {

class JsonConfigReader;

enum class GemmaFamily { Gemma2, Gemma3 };

// The Gemma fields of a config.json (core/model/hf_gemma_config.cpp), after the Llama fields were read.
void read_gemma_fields(const JsonConfigReader& reader, GemmaFamily family, ModelConfig& config);
// The same from a GGUF file's gemma2 / gemma3 metadata (core/model/config.cpp calls it).
void read_gemma_fields(const GgufFile& file, GemmaFamily family, ModelConfig& config);

// Which layers are local: config.json's layer_types ("sliding_attention" / "full_attention"), else its
// sliding_window_pattern, else `default_pattern` (core/model/hf_gemma_config.cpp; gpt-oss reads them too).
std::vector<bool> read_layer_types(const JsonConfigReader& reader, int n_layers, int default_pattern);

// What every checkpoint of the family has, whatever its config says.
void apply_gemma_architecture(ModelConfig& config, GemmaFamily family);

// Layer l is global when (l + 1) is a multiple of `pattern` (transformers' sliding_window_pattern rule); a
// pattern of 1 makes every layer global.
std::vector<bool> local_layers_from_pattern(int n_layers, int pattern);

// The factor on q that turns the kernels' 1/sqrt(head_dim) into Gemma's query_pre_attn_scalar^-1/2.
float gemma_query_scale(int head_dim, double query_pre_attn_scalar);

// The family's default sliding-window pattern (2 for Gemma 2, 6 for Gemma 3).
int default_window_pattern(GemmaFamily family);

}  // namespace kvscope::model
