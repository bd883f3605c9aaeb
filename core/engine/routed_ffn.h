#pragma once
// The feed-forward block of a mixture-of-experts layer (Mixtral, Qwen3-MoE): the router picks experts per token
// (expert_routing.h), each expert runs its SwiGLU on the rows routed to it, and the weighted outputs are added
// to the residual stream. Written with the backend's ops and host copies only, so it runs wherever they do.
#include <vector>

#include "core/engine/expert_routing.h"
#include "kernels/backend.h"

namespace kvscope::engine {

// n rows of s.xb (the FFN's normed input; overwritten) through layer `lw`'s experts, the sum added to s.x.
// `choices` receives n * shape.n_experts_used entries, row-major: row r's experts, most probable first.
void routed_ffn(kernels::Backend& b, const kernels::ModelShape& shape, const kernels::LayerWeights& lw,
                kernels::RunState& s, int n, std::vector<ExpertChoice>& choices);

}  // namespace kvscope::engine
