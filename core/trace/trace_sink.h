#pragma once
// Where a recorded run goes. The Recorder computes (pools maps, reduces statistics, tracks what became of
// every position) and hands the results to any number of sinks: the HDF5 writer (a file in the layout of
// docs/trace-format.md) and the live trace a window draws from (core/trace/live_trace.h). A RunTrace that
// is already in memory goes to a sink through emit_run (core/trace/emit_run.h), so saving what is on
// screen writes what is in memory, through the same calls a live run makes.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/policy/diagnostics.h"
#include "core/trace/trace_view.h"

namespace kvscope::trace {

// The fixed shape of one run, known before it starts.
struct RunLayout {
  std::string name;                              // group name under /runs, [A-Za-z0-9_.-]+
  std::map<std::string, std::string> metadata;   // written as string attributes of the run group
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int prompt_length = 0;
  int max_positions = 0;                         // prompt + max new tokens: the kept-mask position axis
  std::vector<int32_t> prompt_ids;
  std::vector<std::string> prompt_strings;
  int decode_cols = 0, decode_col_block = 1;     // decode attention rows (0 cols: not recorded)
  Pooling decode_pooling = Pooling::Max;
  bool decode_sink = false;                      // with decode rows: each row's sink share (models with sink logits)
  bool nmse = false;
  bool qk = false;                               // exact attention's queries, keys and log-sum-exp (qk_span.h)
  double qk_scale = 0.0;                         // the score scale attention used, when qk
  int router_k = 0;                              // experts chosen per token and layer (mixture of experts; 0: none)
  std::vector<int> qk_layers{};                  // when qk: the layers whose q/k are recorded, sorted
  double qk_softcap = 0.0;                       // scores became c * tanh(s / c) before the softmax (0: none)
  // Per layer, the sliding window its queries saw (0: a global layer); empty for a model without local layers.
  std::vector<int32_t> layer_windows = {};
};

// Everything one engine step adds to a run.
struct StepRecord {
  StepStats stats;
  std::vector<Event> events;
  std::vector<std::vector<uint8_t>> kept;        // [layers][kv_heads * max_positions], KeptState values
  bool has_token = false;
  int32_t token = -1;
  std::string token_string;
  float logprob = 0.0f;
  std::vector<float> decode_attention;           // [layers][heads][decode_cols], decode steps only
  std::vector<float> decode_attention_sink;      // [layers][heads]: the sink's share of each decode row (decode_sink)
  std::vector<float> nmse;                       // [layers], decode steps with NMSE only
  std::vector<TokenRouting> routing;             // the tokens this step fed, in position order (router_k > 0)
};

// Which map a dataset is: prefill attention of (layer, query head), or key / value similarity of (layer,
// KV head). The dataset path in a file follows from it (map_dataset_path in trace_names.h).
// AttentionSink: a model with sink logits (gpt-oss): the sink's share of each prefill attention row, one column
// beside the (layer, query head)'s attention map, pooled over the same row blocks.
enum class MapKind { Attention, KeySimilarity, ValueSimilarity, AttentionSink };
struct MapSlot {
  MapKind kind = MapKind::Attention;
  int layer = 0;
  int index = 0;  // query head for attention, KV head for similarity
  bool operator<(const MapSlot& o) const {
    return std::tie(kind, layer, index) < std::tie(o.kind, o.layer, o.index);
  }
};

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // Returns the run's id for the calls below.
  virtual int begin_run(RunLayout layout) = 0;
  // A map whose rows follow through write_map_rows (`shape` gives the shape and pooling; values ignored).
  virtual void create_map(int run, const MapSlot& slot, const Map2D& shape, const std::string& units,
                          const std::string& definition) = 0;
  // Rows [first_row, first_row + n_rows) of a created map, row-major floats.
  virtual void write_map_rows(int run, const MapSlot& slot, int first_row, int n_rows, std::span<const float> values) = 0;
  // A map computed whole. A symmetric map may be stored as its lower triangle (upper cells 0).
  virtual void write_map(int run, const MapSlot& slot, const Map2D& map, const std::string& units,
                         const std::string& definition, bool lower_triangle = false) = 0;
  // A map that already lives in memory as an immutable, shared one (a captured prefill's, adopted by a
  // later run): a sink that keeps maps in memory keeps the pointer instead of a copy; others write it.
  virtual void share_map(int run, const MapSlot& slot, const std::shared_ptr<const Map2D>& map,
                         const std::string& units, const std::string& definition, bool lower_triangle = false) {
    write_map(run, slot, *map, units, definition, lower_triangle);
  }
  virtual void write_stat(int run, const std::string& name, const LayerHeadStat& stat) = 0;
  virtual void write_layer_stat(int run, const std::string& name, const LayerStat& stat) = 0;
  virtual void write_series(int run, const std::string& name, const policy::Series& series) = 0;
  virtual void write_layer_budgets(int run, const std::vector<int>& budgets) = 0;
  virtual void append_step(int run, StepRecord record) = 0;
  // The next positions' queries, keys and log-sum-exp (spans arrive in position order, from 0, without gaps).
  virtual void append_qk(int run, const QKSpanRef& span) = 0;
  // Final attributes (stop reason, timings ...); the run is complete after this.
  virtual void end_run(int run, const std::map<std::string, std::string>& final_metadata) = 0;
  // A point worth keeping: the writer flushes the file so a killed run keeps it; a live trace publishes.
  virtual void flush() {}
};

}  // namespace kvscope::trace
