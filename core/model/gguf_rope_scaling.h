#pragma once
// A GGUF file's rope scaling, read the same way for every architecture: the `{arch}.rope.scaling.*` keys
// llama.cpp's converter writes (type, factor, original_context_length, attn_factor and YaRN's yarn_beta_fast,
// yarn_beta_slow, yarn_attn_factor, yarn_log_multiplier, yarn_ext_factor) and Phi-3's rope_factors tensors, into
// ModelConfig::rope_scaling, the per-pair divisors and the cos/sin factor that a config.json's rope_parameters
// give (core/model/rope_scaling.h), so both formats run the same RoPE. A scaling kvscope does not compute is
// refused, naming the key and its value.
#include "core/model/config.h"

namespace kvscope::model {

// After read_positions (the base, rope_dim and a rope_freqs tensor). Throws Error naming the file and key.
void read_gguf_rope_scaling(const GgufFile& file, ModelConfig& config);

}  // namespace kvscope::model
