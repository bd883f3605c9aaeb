#pragma once
// Window-free logic behind the panels: which layer/head/token is selected and how selections link
// across runs, pooling a map down to what a texture can show, and what happened to each cache entry.
// Everything here is plain data in, plain data out, so tests/viewers can check it without a display.
#include <cstdint>
#include <string>
#include <vector>

#include "core/trace/trace_view.h"

namespace kvscope::viewers {

// The shape a selection must fit in.
struct RunShape {
  int n_layers = 0, n_heads = 0, n_kv_heads = 0;
  int n_positions = 0;  // prompt + generated tokens
  int n_steps = 0;
};
// Positions the run processed: its prompt and generated tokens, or the most any step saw (a recording reserves
// room for max new tokens in its kept masks; a run that stopped early never reached the rest).
int positions_processed(const trace::RunTrace& run);
RunShape shape_of(const trace::RunTrace& run);
// Query head -> the KV head it reads (grouped-query attention).
int kv_head_of(int head, const RunShape& shape);

struct Selection {
  int layer = 0;
  int head = 0;  // query head
  int step = -1; // -1: the last recorded step
};
Selection clamp(Selection s, const RunShape& shape);

// One selection per column of a comparison. When linked, choosing a layer or head in one column moves
// every column there (clamped to each run's own shape), so columns show the same place in the model.
class LinkedSelection {
 public:
  bool linked = true;
  void resize(std::size_t columns);
  std::size_t size() const { return columns_.size(); }
  const Selection& operator[](std::size_t i) const { return columns_[i]; }
  void set_layer(std::size_t column, int layer, const std::vector<RunShape>& shapes);
  void set_head(std::size_t column, int head, const std::vector<RunShape>& shapes);
  void set_step(std::size_t column, int step, const std::vector<RunShape>& shapes);

 private:
  template <typename F>
  void apply(std::size_t column, const std::vector<RunShape>& shapes, F&& change);
  std::vector<Selection> columns_;
};

// The source rows/columns one stored cell of a map covers, [begin, end).
struct CellSpan {
  int row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
};
CellSpan cell_span(const trace::Map2D& map, int row, int col);
// The stored cell under source coordinates (x = key position, y = query position); false outside.
bool cell_at(const trace::Map2D& map, double x, double y, int& row, int& col);

// Coarsens a map by whole blocks so it has at most max_rows x max_cols cells, using the map's own
// pooling (max, or the coverage-weighted mean so the result equals the mean over the source cells).
// NaN cells are skipped; a block of only NaN stays NaN.
trace::Map2D pool_for_display(const trace::Map2D& map, int max_rows, int max_cols);
// Coarsens by integer factors (row_factor, col_factor >= 1).
trace::Map2D pool_by(const trace::Map2D& map, int row_factor, int col_factor);
// a - b on a common grid (both pooled to the coarser of their blocks); throws Error when the maps
// describe different source shapes, since then no cell of one corresponds to a cell of the other.
trace::Map2D difference(const trace::Map2D& a, const trace::Map2D& b);
// The first `source_rows` x `source_cols` source cells of `map` (the stored cells covering them): two runs' decode
// maps over the steps and positions both ran, when one stopped generating earlier.
trace::Map2D crop_source(const trace::Map2D& map, int source_rows, int source_cols);

// What became of a cache entry by the end of a step.
enum class EntryState : uint8_t { NotYetSeen = 0, Kept = 1, Evicted = 2, Merged = 3 };

// [steps][positions] states for one (layer, kv head), from the kept mask when the trace has one,
// else reconstructed from the events table and the per-step sequence lengths.
std::vector<uint8_t> entry_states(const trace::RunTrace& run, int layer, int kv_head);
// Kept flags at the end of `step` (-1: last step), one per position.
std::vector<uint8_t> kept_set(const trace::RunTrace& run, int layer, int kv_head, int step = -1);

struct KeptDiff {
  enum : uint8_t { Neither = 0, OnlyA = 1, OnlyB = 2, Both = 3 };
  std::vector<uint8_t> state;  // per position
  int only_a = 0, only_b = 0, both = 0, neither = 0;
  double jaccard = 1.0;  // |A ∩ B| / |A ∪ B|, 1 when both are empty
};
// Positions beyond the shorter set count as not kept in it.
KeptDiff diff_kept(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

// The positions at which two runs' caches hold the same tokens, so that their kept sets can be compared:
// the prompt both share (the common prefix of their prompt ids), and after it, when the prompts are
// equal, the generated tokens both runs agree on (the common prefix of their generated ids). Past the
// first differing token a position holds a different token in each run.
struct ComparableSpan {
  int prompt = 0;     // positions 0 .. prompt-1
  int generated = 0;  // then positions prompt .. prompt+generated-1
  int length(bool with_generated) const { return prompt + (with_generated ? generated : 0); }
};
ComparableSpan comparable_span(const trace::RunTrace& a, const trace::RunTrace& b);
// The first generated token on which two runs of the same prompt differ (its index is also the decode row whose
// query first differs), or -1: other prompts, or no differing token while both were generating (equal, or one
// stopped earlier).
int first_divergent_token(const trace::RunTrace& a, const trace::RunTrace& b);
// The kept sets of two runs at their last steps, compared over the first `length` positions only.
KeptDiff diff_kept_over(const trace::RunTrace& a, const trace::RunTrace& b, int layer, int kv_head, int length);

// Per position, the share of (layer, kv head) caches that still hold it at the end of `step` (-1: last).
std::vector<float> retention(const trace::RunTrace& run, int step = -1);

// Per layer: mean, min and max over heads of a per-(layer, head) statistic.
struct LayerSummary {
  std::vector<double> mean, min, max;
};
LayerSummary summarize_layers(const trace::LayerHeadStat& stat);

// A printable token: control characters and leading spaces shown so the strip stays readable.
std::string display_token(const std::string& piece);
// display_token of every position (prompt, then generated), as an axis names the cells.
std::vector<std::string> position_tokens(const trace::RunTrace& run);

}  // namespace kvscope::viewers
