#pragma once
// The cache at any step: what one (layer, KV head) held at the end of a selected step, how the step is named,
// and which cells of an attention map a step's cache left without attention (keys after the row, or no longer in
// the cache), so the panels can show any step of a run, not only its end. Plain data in and out, tested in
// tests/viewers/step_cache_test.cpp against a replay of the recorded events.
#include <cstdint>
#include <string>
#include <vector>

#include "core/trace/trace_view.h"

namespace kvscope::viewers {

// A step selection (-1: the last recorded step) resolved to a row of the run's steps; -1 when the run has none.
int resolve_step(const trace::RunTrace& run, int step);

struct StepCache {
  int step = -1;                // row of steps/ shown, -1 when the run has no steps yet
  int seq_len = 0;              // tokens processed by the end of the step
  std::vector<uint8_t> states;  // per position (prompt, then generated): EntryState at the end of the step
  int kept = 0, evicted = 0, merged = 0;
};
// What (layer, kv_head) held at the end of `step` (-1: the last step). Read from entry_states (the kept mask, or a
// replay of the events when a trace has none).
StepCache cache_at_step(const trace::RunTrace& run, int layer, int kv_head, int step);

// "prefill block 0" / "decode step 3 (token 'the')": what step row `step` of the run was.
std::string step_name(const trace::RunTrace& run, int step);

// Sets to NaN (drawn as "no attention") every cell of `map` none of whose (query, key) pairs was attended:
// keys after the query (causal) and keys the cache no longer held when the query ran (trace::AttendedKeys).
// Row r of the map is query position first_query + r (the prompt's rows: 0; decode rows: the prompt length), column
// c key position first_key + c. Cells whose membership is unknown (no kept mask) keep their value.
void blank_unattended(trace::Map2D& map, const trace::RunTrace& run, int layer, int kv_head, int first_query, int first_key = 0);

}  // namespace kvscope::viewers
