#include "viewers/step_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/trace/attended_keys.h"
#include "viewers/view_model.h"

namespace kvscope::viewers {

int resolve_step(const trace::RunTrace& run, int step) {
  const int n = run.n_steps();
  if (n == 0) return -1;
  return step < 0 || step >= n ? n - 1 : step;
}

StepCache cache_at_step(const trace::RunTrace& run, int layer, int kv_head, int step) {
  StepCache out;
  const std::vector<uint8_t> states = entry_states(run, layer, kv_head);
  const RunShape shape = shape_of(run);
  const int n_pos = std::max(shape.n_positions, 1);
  const int n_state_steps = static_cast<int>(states.size()) / n_pos;
  out.step = std::min(resolve_step(run, step), n_state_steps - 1);
  if (out.step < 0) return out;
  out.seq_len = run.steps[out.step].seq_len;
  out.states.assign(states.begin() + static_cast<std::ptrdiff_t>(out.step) * n_pos,
                    states.begin() + static_cast<std::ptrdiff_t>(out.step + 1) * n_pos);
  for (uint8_t s : out.states) {
    out.kept += s == static_cast<uint8_t>(EntryState::Kept);
    out.evicted += s == static_cast<uint8_t>(EntryState::Evicted);
    out.merged += s == static_cast<uint8_t>(EntryState::Merged);
  }
  return out;
}

std::string step_name(const trace::RunTrace& run, int step) {
  if (step < 0 || step >= run.n_steps()) return "no step";
  const trace::StepStats& s = run.steps[step];
  if (s.phase == 0) return "prefill block " + std::to_string(s.step);
  // Decode step t feeds generated token t (docs/trace-format.md).
  std::string name = "decode step " + std::to_string(s.step);
  if (s.step >= 0 && s.step < static_cast<int>(run.generated_strings.size()))
    name += " (feeds '" + display_token(run.generated_strings[s.step]) + "')";
  return name;
}

void blank_unattended(trace::Map2D& map, const trace::RunTrace& run, int layer, int kv_head, int first_query, int first_key) {
  if (map.empty()) return;
  const trace::AttendedKeys attended(run, layer, kv_head);
  std::vector<trace::KeyState> row(static_cast<std::size_t>(map.source_cols));
  // attended_any[c]: some query of the current block of rows attended some key of column block c.
  std::vector<uint8_t> attended_any(static_cast<std::size_t>(map.cols));
  for (int r = 0; r < map.rows; ++r) {
    std::fill(attended_any.begin(), attended_any.end(), 0);
    const CellSpan rows = cell_span(map, r, 0);
    for (int q = rows.row_begin; q < rows.row_end; ++q) {
      attended.row(first_query + q, first_key, first_key + map.source_cols, row.data());
      for (int k = 0; k < map.source_cols; ++k)
        if (row[k] == trace::KeyState::Attended || row[k] == trace::KeyState::Unknown) attended_any[k / map.col_block] = 1;
    }
    for (int c = 0; c < map.cols; ++c)
      if (!attended_any[c]) map.values[static_cast<std::size_t>(r) * map.cols + c] = std::numeric_limits<float>::quiet_NaN();
  }
}

}  // namespace kvscope::viewers
