#pragma once
// The ggml tensor types belong to the kernels library (kernels/ggml_type.h); the model readers name them in
// their own namespace.
#include "kernels/ggml_type.h"

namespace kvscope::model {
using kernels::ggml_row_bytes;
using kernels::ggml_type_name;
using kernels::ggml_type_traits;
using kernels::GgmlType;
using kernels::GgmlTypeTraits;
}  // namespace kvscope::model
