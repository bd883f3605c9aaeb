#pragma once
// Sliding-window ("local") layers hold at most their window. A query at position p sees keys at positions
// > p - window, so before a forward call appends positions p0.. the entries at or below p0 - window are of no
// use to any of its queries, and at the end of the step (after the policy's edit, which may rest on the
// step's observations) those at or below p_last - window are of no use to the next one: the engine drops
// both. A decode step never holds more than the window; a prefill block of n tokens holds at most
// window - 1 + n while it attends, and the window once the step ends.
#include "core/cache/cache_edit.h"
#include "core/cache/kv_cache.h"

namespace kvscope::engine {

// The edit that drops `layer`'s entries at positions below `first_kept` from every KV head; empty when none is.
cache::CacheEdit window_trim(const cache::KVCache& cache, int layer, int first_kept);

}  // namespace kvscope::engine
