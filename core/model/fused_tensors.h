#pragma once
// Matrices that a checkpoint stores inside a larger tensor, as views (nothing is copied): the row blocks of
// Phi-3's fused projections (qkv_proj: q, k, v rows; gate_up_proj: gate, up rows) and one expert of llama.cpp's
// merged expert tensors ([n_experts][rows][cols], ffn_gate_exps and its relatives).
#include <vector>

#include "kernels/model_weights.h"

namespace kvscope::model {

// Rows [first_row, first_row + rows) of `m`; throws Error when they are not inside it.
kernels::QuantMatrix row_block(const kernels::QuantMatrix& m, int first_row, int rows);

// `m` cut into consecutive row blocks of the given heights, which must add up to m.rows.
std::vector<kernels::QuantMatrix> split_rows(const kernels::QuantMatrix& m, const std::vector<int>& heights);

// The n_experts matrices of rows x cols stacked in `merged` (a matrix of n_experts * rows rows).
std::vector<kernels::QuantMatrix> split_experts(const kernels::QuantMatrix& merged, int n_experts);

}  // namespace kvscope::model
