#pragma once
// Maps are stored as half floats; the conversions live with the kernels (kernels/common/float16.h), which store
// the f16 KV cache the same way.
#include "kernels/common/float16.h"

namespace kvscope::trace {
using kernels::float_to_half;
using kernels::floats_to_half;
using kernels::half_to_float;
using kernels::halves_to_float;
}  // namespace kvscope::trace
