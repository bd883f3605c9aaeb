#pragma once
// `obs.rope` of a Python scorer: the model's RoPE as the engine applies it (theta, rotated dimensions, pair
// layout, rope scaling and the per-pair frequencies) and `rotate(x, positions, inverse=False)`, which turns
// a (..., head_dim) array to or from the given positions with the engine's own arithmetic
// (kernels/common/rope_math.h). docs/policies.md, "Python", lists the attributes.
#include <pybind11/pybind11.h>

#include "core/model/config.h"

namespace kvscope::policy {

// A Python object for `config`'s RoPE; call with the GIL held. Independent of any run: it may be kept.
pybind11::object make_python_rope(const model::ModelConfig& config);

}  // namespace kvscope::policy
