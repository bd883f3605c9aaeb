#pragma once
// What the window does with a RunChoice (panel.h), a point a user clicked in the Quality panel: a run of that
// configuration already on screen is shown (no second run of the same thing); otherwise the set-up form runs it.
#include <string>

#include "viewers/panel.h"

namespace kvscope::viewers {

// The cache type name a choice means, as runs record it (meta "cache_type"): "f32" for an empty one. Throws
// UsageError naming an unknown type.
std::string choice_cache_type(const RunChoice& choice);

// The run on screen of `choice` on `prompt` (its policy spec or name, budget and cache type as the run recorded
// them), the most recent one first; -1 when there is none.
int run_of_choice(const AppState& state, const RunChoice& choice, const std::string& prompt);

// "snapkv at 25% with a q8_0 cache" ("snapkv at 25%" for float32).
std::string describe_choice(const RunChoice& choice);

}  // namespace kvscope::viewers
