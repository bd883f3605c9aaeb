#include "viewers/view_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "core/common/error.h"

namespace kvscope::viewers {

int positions_processed(const trace::RunTrace& run) {
  int n = run.prompt_length + run.n_generated();
  for (const auto& s : run.steps) n = std::max(n, static_cast<int>(s.seq_len));
  return n;
}

RunShape shape_of(const trace::RunTrace& run) {
  RunShape s;
  s.n_layers = run.n_layers;
  s.n_heads = run.n_heads;
  s.n_kv_heads = run.n_kv_heads;
  s.n_positions = run.prompt_length + run.n_generated();
  if (!run.kept_mask.empty()) s.n_positions = std::max(s.n_positions, run.kept_mask.front().n_positions);
  s.n_steps = run.n_steps();
  return s;
}

int kv_head_of(int head, const RunShape& shape) {
  if (shape.n_kv_heads <= 0 || shape.n_heads <= 0) return 0;
  const int group = std::max(1, shape.n_heads / shape.n_kv_heads);
  return std::min(head / group, shape.n_kv_heads - 1);
}

Selection clamp(Selection s, const RunShape& shape) {
  s.layer = std::clamp(s.layer, 0, std::max(0, shape.n_layers - 1));
  s.head = std::clamp(s.head, 0, std::max(0, shape.n_heads - 1));
  s.step = s.step < 0 ? -1 : std::min(s.step, std::max(0, shape.n_steps - 1));
  return s;
}

void LinkedSelection::resize(std::size_t columns) { columns_.resize(columns); }

template <typename F>
void LinkedSelection::apply(std::size_t column, const std::vector<RunShape>& shapes, F&& change) {
  if (column >= columns_.size()) return;
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    if (!linked && i != column) continue;
    change(columns_[i]);
    if (i < shapes.size()) columns_[i] = clamp(columns_[i], shapes[i]);
  }
}

void LinkedSelection::set_layer(std::size_t column, int layer, const std::vector<RunShape>& shapes) {
  apply(column, shapes, [layer](Selection& s) { s.layer = layer; });
}
void LinkedSelection::set_head(std::size_t column, int head, const std::vector<RunShape>& shapes) {
  apply(column, shapes, [head](Selection& s) { s.head = head; });
}
void LinkedSelection::set_step(std::size_t column, int step, const std::vector<RunShape>& shapes) {
  apply(column, shapes, [step](Selection& s) { s.step = step; });
}

CellSpan cell_span(const trace::Map2D& map, int row, int col) {
  CellSpan s;
  s.row_begin = row * map.row_block;
  s.row_end = std::min((row + 1) * map.row_block, map.source_rows);
  s.col_begin = col * map.col_block;
  s.col_end = std::min((col + 1) * map.col_block, map.source_cols);
  return s;
}

bool cell_at(const trace::Map2D& map, double x, double y, int& row, int& col) {
  if (map.empty() || x < 0 || y < 0 || x >= map.source_cols || y >= map.source_rows) return false;
  row = std::min(static_cast<int>(y) / std::max(1, map.row_block), map.rows - 1);
  col = std::min(static_cast<int>(x) / std::max(1, map.col_block), map.cols - 1);
  return true;
}

trace::Map2D pool_by(const trace::Map2D& map, int row_factor, int col_factor) {
  row_factor = std::max(1, row_factor);
  col_factor = std::max(1, col_factor);
  if (row_factor == 1 && col_factor == 1) return map;
  trace::Map2D out;
  out.source_rows = map.source_rows;
  out.source_cols = map.source_cols;
  out.row_block = map.row_block * row_factor;
  out.col_block = map.col_block * col_factor;
  out.pooling = map.pooling;
  out.rows = (map.rows + row_factor - 1) / row_factor;
  out.cols = (map.cols + col_factor - 1) / col_factor;
  out.values.assign(static_cast<std::size_t>(out.rows) * out.cols, std::numeric_limits<float>::quiet_NaN());
  for (int r = 0; r < out.rows; ++r)
    for (int c = 0; c < out.cols; ++c) {
      double acc = map.pooling == trace::Pooling::Max ? -std::numeric_limits<double>::infinity() : 0.0;
      double weight = 0.0;
      bool any = false;
      for (int rr = r * row_factor; rr < std::min((r + 1) * row_factor, map.rows); ++rr)
        for (int cc = c * col_factor; cc < std::min((c + 1) * col_factor, map.cols); ++cc) {
          const float v = map.at(rr, cc);
          if (std::isnan(v)) continue;
          any = true;
          if (map.pooling == trace::Pooling::Max) {
            acc = std::max(acc, static_cast<double>(v));
          } else {
            // Edge cells of the source may cover fewer source rows/cols than a full block.
            const CellSpan span = cell_span(map, rr, cc);
            const double w = static_cast<double>(span.row_end - span.row_begin) * (span.col_end - span.col_begin);
            acc += w * v;
            weight += w;
          }
        }
      if (!any) continue;
      out.values[static_cast<std::size_t>(r) * out.cols + c] =
          static_cast<float>(map.pooling == trace::Pooling::Max ? acc : (weight > 0 ? acc / weight : 0.0));
    }
  return out;
}

trace::Map2D pool_for_display(const trace::Map2D& map, int max_rows, int max_cols) {
  const int fr = map.rows > max_rows ? (map.rows + max_rows - 1) / std::max(1, max_rows) : 1;
  const int fc = map.cols > max_cols ? (map.cols + max_cols - 1) / std::max(1, max_cols) : 1;
  return pool_by(map, fr, fc);
}

trace::Map2D difference(const trace::Map2D& a, const trace::Map2D& b) {
  if (a.source_rows != b.source_rows || a.source_cols != b.source_cols)
    throw Error("cannot difference maps of different source shapes (" + std::to_string(a.source_rows) + "x" +
                std::to_string(a.source_cols) + " vs " + std::to_string(b.source_rows) + "x" +
                std::to_string(b.source_cols) + ")");
  const int rb = std::lcm(std::max(1, a.row_block), std::max(1, b.row_block));
  const int cb = std::lcm(std::max(1, a.col_block), std::max(1, b.col_block));
  const trace::Map2D pa = pool_by(a, rb / std::max(1, a.row_block), cb / std::max(1, a.col_block));
  const trace::Map2D pb = pool_by(b, rb / std::max(1, b.row_block), cb / std::max(1, b.col_block));
  trace::Map2D out = pa;
  for (std::size_t i = 0; i < out.values.size() && i < pb.values.size(); ++i) out.values[i] = pa.values[i] - pb.values[i];
  return out;
}

trace::Map2D crop_source(const trace::Map2D& map, int source_rows, int source_cols) {
  source_rows = std::clamp(source_rows, 0, map.source_rows);
  source_cols = std::clamp(source_cols, 0, map.source_cols);
  if (source_rows == map.source_rows && source_cols == map.source_cols) return map;
  trace::Map2D out = map;
  out.source_rows = source_rows;
  out.source_cols = source_cols;
  out.rows = std::min(map.rows, (source_rows + std::max(1, map.row_block) - 1) / std::max(1, map.row_block));
  out.cols = std::min(map.cols, (source_cols + std::max(1, map.col_block) - 1) / std::max(1, map.col_block));
  out.values.resize(static_cast<std::size_t>(out.rows) * out.cols);
  for (int r = 0; r < out.rows; ++r)
    std::copy(map.row(r), map.row(r) + out.cols, out.values.begin() + static_cast<std::ptrdiff_t>(r) * out.cols);
  if (!out.source_positions.empty()) out.source_positions.clear();  // positions are 0.. in the maps cropped here
  return out;
}

namespace {

int positions_of(const trace::RunTrace& run) {
  int n = positions_processed(run);
  if (!run.kept_mask.empty()) n = std::max(n, run.kept_mask.front().n_positions);
  return n;
}

}  // namespace

std::vector<uint8_t> entry_states(const trace::RunTrace& run, int layer, int kv_head) {
  const int n_pos = positions_of(run);
  const bool have_mask = layer >= 0 && layer < static_cast<int>(run.kept_mask.size()) &&
                         kv_head >= 0 && kv_head < run.kept_mask[layer].n_kv_heads;
  const int n_steps = have_mask ? run.kept_mask[layer].n_steps : run.n_steps();
  std::vector<uint8_t> out(static_cast<std::size_t>(n_steps) * n_pos, static_cast<uint8_t>(EntryState::NotYetSeen));
  auto seen = [&](int step) {
    return step < run.n_steps() ? static_cast<int>(run.steps[step].seq_len) : n_pos;
  };
  if (have_mask) {
    const trace::KeptMask& m = run.kept_mask[layer];
    for (int s = 0; s < n_steps; ++s) {
      const int limit = std::min(seen(s), m.n_positions);
      for (int p = 0; p < limit; ++p) {
        const uint8_t v = m.at(kv_head, p, s);
        out[static_cast<std::size_t>(s) * n_pos + p] = static_cast<uint8_t>(
            v == trace::kKept ? EntryState::Kept : v == trace::kMergedAway ? EntryState::Merged : EntryState::Evicted);
      }
    }
    return out;
  }
  // No mask: replay the events in step order. Events name (phase, step); rows of `steps` are in order.
  std::map<std::pair<int, int>, int> row_of;
  for (int s = 0; s < run.n_steps(); ++s) row_of[{run.steps[s].phase, run.steps[s].step}] = s;
  std::vector<std::vector<const trace::Event*>> by_row(n_steps);
  for (const auto& e : run.events) {
    if (e.layer != layer || e.kv_head != kv_head) continue;
    auto it = row_of.find({e.phase, e.step});
    if (it != row_of.end()) by_row[it->second].push_back(&e);
  }
  std::vector<uint8_t> current(n_pos, static_cast<uint8_t>(EntryState::Kept));
  for (int s = 0; s < n_steps; ++s) {
    for (const auto* e : by_row[s])
      if (e->position >= 0 && e->position < n_pos)
        current[e->position] = static_cast<uint8_t>(e->action == trace::EventAction::Merged ? EntryState::Merged
                                                                                              : EntryState::Evicted);
    const int limit = std::min(seen(s), n_pos);
    std::copy(current.begin(), current.begin() + limit, out.begin() + static_cast<std::ptrdiff_t>(s) * n_pos);
  }
  return out;
}

std::vector<uint8_t> kept_set(const trace::RunTrace& run, int layer, int kv_head, int step) {
  const std::vector<uint8_t> states = entry_states(run, layer, kv_head);
  const int n_pos = positions_of(run);
  const int n_steps = n_pos > 0 ? static_cast<int>(states.size()) / n_pos : 0;
  std::vector<uint8_t> out(n_pos, 0);
  if (n_steps == 0) return out;
  const int s = step < 0 || step >= n_steps ? n_steps - 1 : step;
  for (int p = 0; p < n_pos; ++p)
    out[p] = states[static_cast<std::size_t>(s) * n_pos + p] == static_cast<uint8_t>(EntryState::Kept);
  return out;
}

KeptDiff diff_kept(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  KeptDiff d;
  const std::size_t n = std::max(a.size(), b.size());
  d.state.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const bool in_a = i < a.size() && a[i], in_b = i < b.size() && b[i];
    d.state[i] = static_cast<uint8_t>((in_a ? KeptDiff::OnlyA : 0) | (in_b ? KeptDiff::OnlyB : 0));
    if (in_a && in_b) ++d.both;
    else if (in_a) ++d.only_a;
    else if (in_b) ++d.only_b;
    else ++d.neither;
  }
  const int uni = d.both + d.only_a + d.only_b;
  d.jaccard = uni == 0 ? 1.0 : static_cast<double>(d.both) / uni;
  return d;
}

namespace {

int common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return static_cast<int>(std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first -
                          a.begin());
}

}  // namespace

ComparableSpan comparable_span(const trace::RunTrace& a, const trace::RunTrace& b) {
  ComparableSpan span;
  span.prompt = common_prefix(a.prompt_ids, b.prompt_ids);
  if (a.prompt_ids == b.prompt_ids) span.generated = common_prefix(a.generated_ids, b.generated_ids);
  return span;
}

int first_divergent_token(const trace::RunTrace& a, const trace::RunTrace& b) {
  if (a.prompt_ids != b.prompt_ids) return -1;
  const int agree = common_prefix(a.generated_ids, b.generated_ids);
  const int both = static_cast<int>(std::min(a.generated_ids.size(), b.generated_ids.size()));
  return agree < both ? agree : -1;
}

KeptDiff diff_kept_over(const trace::RunTrace& a, const trace::RunTrace& b, int layer, int kv_head, int length) {
  std::vector<uint8_t> ka = kept_set(a, layer, kv_head), kb = kept_set(b, layer, kv_head);
  ka.resize(std::min(ka.size(), static_cast<std::size_t>(std::max(0, length))));
  kb.resize(std::min(kb.size(), static_cast<std::size_t>(std::max(0, length))));
  KeptDiff d = diff_kept(ka, kb);
  // A run that stopped early never saw some compared positions: they count as not kept, as in diff_kept.
  d.state.resize(std::max(0, length), KeptDiff::Neither);
  d.neither += std::max(0, length) - static_cast<int>(std::max(ka.size(), kb.size()));
  return d;
}

std::vector<float> retention(const trace::RunTrace& run, int step) {
  const int n_pos = positions_of(run);
  std::vector<float> out(n_pos, 1.0f);
  if (run.n_layers <= 0 || run.n_kv_heads <= 0) return out;
  if (run.kept_mask.empty() && run.events.empty()) return out;  // full cache: everything stays
  std::vector<int> count(n_pos, 0);
  for (int l = 0; l < run.n_layers; ++l)
    for (int h = 0; h < run.n_kv_heads; ++h) {
      const auto kept = kept_set(run, l, h, step);
      for (int p = 0; p < n_pos && p < static_cast<int>(kept.size()); ++p) count[p] += kept[p];
    }
  const float total = static_cast<float>(run.n_layers * run.n_kv_heads);
  for (int p = 0; p < n_pos; ++p) out[p] = count[p] / total;
  return out;
}

LayerSummary summarize_layers(const trace::LayerHeadStat& stat) {
  LayerSummary s;
  for (const auto& heads : stat.values) {
    double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
    int n = 0;
    for (double v : heads) {
      if (!std::isfinite(v)) continue;
      sum += v, lo = std::min(lo, v), hi = std::max(hi, v), ++n;
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    s.mean.push_back(n ? sum / n : nan);
    s.min.push_back(n ? lo : nan);
    s.max.push_back(n ? hi : nan);
  }
  return s;
}

std::string display_token(const std::string& piece) {
  std::string out;
  for (unsigned char ch : piece) {
    if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else if (ch == '\r') out += "\\r";
    else if (ch < 0x20) out += "?";
    else if (ch == ' ') out += "\xC2\xB7";  // middle dot: spaces are part of the token and worth seeing
    else out += static_cast<char>(ch);
  }
  return out.empty() ? std::string("''") : out;
}

std::vector<std::string> position_tokens(const trace::RunTrace& run) {
  std::vector<std::string> out;
  for (const auto& piece : run.prompt_strings) out.push_back(display_token(piece));
  for (const auto& piece : run.generated_strings) out.push_back(display_token(piece));
  return out;
}

}  // namespace kvscope::viewers
