#pragma once
// gpt-oss's MXFP4 experts as transformers stores them (integrations/mxfp4.py), rewritten at load into ggml's MXFP4
// rows (kernels/common/quant_blocks.h), so that a folder's experts run as a GGUF's do.
#include <cstddef>
#include <cstdint>

namespace kvscope::model {

// One projection of every expert: `blocks` [experts][rows][groups][16] holds each output row's E2M1 codes, 32
// input values a group, value 2j in the low nibble of byte j and 2j + 1 in its high nibble; `scales`
// [experts][rows][groups] each group's E8M0 exponent (value = e2m1 * 2^(scale - 127)). Rows are outputs (W x).
struct Mxfp4Experts {
  const uint8_t* blocks = nullptr;
  const uint8_t* scales = nullptr;
  uint64_t rows = 0, groups = 0;

  // Group g of expert e's row r in ggml's layout: the scale byte (the same exponent: ggml halves the scale and
  // doubles the E2M1 values), then value j in the low nibble of byte j and value j + 16 in its high nibble.
  void write_ggml_block(uint64_t e, uint64_t r, uint64_t g, uint8_t* out) const;
  // Every group of expert e's row r, one ggml block after another.
  void write_ggml_row(uint64_t e, uint64_t r, uint8_t* out) const;
};

// Where one gpt-oss layer's experts lie once rewritten, expert after expert: gate [I rows of D], up [I rows of D],
// down [D rows of I], each row ggml's MXFP4 blocks.
struct GgmlMxfp4Layout {
  std::size_t gate_row = 0, down_row = 0;  // bytes of a gate or up row, of a down row
  std::size_t expert_bytes = 0;
  GgmlMxfp4Layout(uint64_t D, uint64_t I);
};

// Writes the experts into `out` (experts * expert_bytes, GgmlMxfp4Layout); gate_up's rows alternate gate_0, up_0,
// gate_1, up_1, ... (GptOssExperts' interleaving). Rows are independent, so OpenMP's threads rewrite them (and first
// touch `out`'s pages); the bytes do not depend on how many threads.
void write_ggml_mxfp4_experts(const Mxfp4Experts& gate_up, const Mxfp4Experts& down, uint64_t experts, uint64_t D,
                              uint64_t I, uint8_t* out);

}  // namespace kvscope::model
