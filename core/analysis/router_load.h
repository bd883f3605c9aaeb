#pragma once
// How evenly a mixture-of-experts run spread its tokens over the experts, per layer, from the router choices a
// trace records (RunTrace::routing): the entropy of the share of all top-k choices each expert received. Equal
// to log2(n_experts) when every expert was chosen equally often, 0 when one expert took every choice; a policy
// whose evictions move the router shows up as a layer whose entropy parts from the full cache's.
#include <vector>

#include "core/trace/trace_view.h"

namespace kvscope::analysis {

// One value per layer, in bits; empty when the run has no routing.
std::vector<double> router_load_entropy(const trace::RunTrace& run);

}  // namespace kvscope::analysis
