#pragma once
// The evidence a policy kept, by layer (issue 35): for one budget of a RULER sweep, one curve per policy of the
// share of each sample's evidence the cache held at the first answer token, averaged over the samples, with a
// 95 % bootstrap band over samples.
#include <optional>
#include <string>
#include <vector>

#include "core/eval/bootstrap.h"
#include "core/eval/sweep_store.h"
#include "viewers/figure.h"

namespace kvscope::viewers {

// Nothing when no row of that budget has per-layer evidence retention.
std::optional<Figure> evidence_retention_by_layer(const std::vector<eval::SweepRow>& rows,
                                                  const std::vector<std::string>& policies, const std::string& budget,
                                                  const eval::BootstrapSettings& settings = {});

}  // namespace kvscope::viewers
