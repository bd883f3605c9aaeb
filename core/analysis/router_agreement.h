#pragma once
// Where a policy's evictions moved a mixture-of-experts router: per layer and fed token, how many of the experts
// the run's router chose the full cache's router also chose for the same token. Prompt tokens before the policy's
// first eviction agree by construction; a decode token the two runs fed differently has no counterpart (its
// router saw another token), so only the tokens both runs fed, in order, are compared.
#include <vector>

#include "core/analysis/map2d.h"
#include "core/trace/trace_view.h"

namespace kvscope::analysis {

// The token a run fed at `position`: the prompt's, then the generated ones fed back; -1 past the last fed.
int fed_token(const trace::RunTrace& run, int position);

// [layers][positions]: |chosen(run) ∩ chosen(baseline)| / k for every position both runs routed; NaN from the first
// position whose fed tokens differ on (the streams parted) and where either run has no row. Empty when either run
// has no routing or their layers or k differ.
Map2D router_agreement(const trace::RunTrace& run, const trace::RunTrace& baseline);

// [experts][positions] of one layer: the weight the router gave each expert it chose for the token, 0 for the
// others. Rows span 0 .. the highest expert id the run chose in any layer (a trace does not store how many
// experts the model has). Empty when the run has no routing or the layer is out of range.
Map2D router_weights(const trace::RunTrace& run, int layer);

}  // namespace kvscope::analysis
