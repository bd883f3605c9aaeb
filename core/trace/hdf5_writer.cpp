#include "core/trace/hdf5_writer.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <future>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/common/build_version.h"
#include "core/common/error.h"
#include "core/trace/chunk_deflate.h"
#include "core/trace/float16.h"
#include "core/trace/hdf5_util.h"
#include "core/trace/trace_names.h"

namespace kvscope::trace {

using h5::Handle;

std::vector<uint16_t> to_half(const float* values, std::size_t n) {
  std::vector<uint16_t> out(n);
  floats_to_half(values, n, out.data());
  return out;
}

namespace {

// Element size of tokens/generated_strings. Strings are fixed-length (no global heap, see
// h5::fixed_string_type), so an appendable dataset needs one width up front: a single decoded token is
// far shorter in every vocabulary we load, and gzip removes the padding.
constexpr std::size_t kGeneratedTokenBytes = 256;

struct StepField {
  const char* name;
  hid_t file_type;
  hid_t mem_type;
  const char* units;
};
const StepField kStepFields[] = {
    {"phase", H5T_STD_U8LE, H5T_NATIVE_UINT8, "0 prefill block, 1 decode step"},
    {"step", H5T_STD_I32LE, H5T_NATIVE_INT32, "prefill block index or decode step index"},
    {"seq_len", H5T_STD_I32LE, H5T_NATIVE_INT32, "tokens processed so far"},
    {"cache_bytes", H5T_STD_U64LE, H5T_NATIVE_UINT64, "bytes of K/V held by the cache at the end of the step"},
    {"cache_entries", H5T_STD_I64LE, H5T_NATIVE_INT64, "entries over all (layer, kv head) at the end of the step"},
    {"ms", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, "milliseconds of wall time since the previous step ended"},
    {"token", H5T_STD_I32LE, H5T_NATIVE_INT32, "token sampled at the end of the step (-1: none)"},
};

}  // namespace

struct Hdf5Writer::State {
  struct Run {
    RunLayout layout;
    Handle group;
    Handle generated_ids, generated_strings, logprobs, events, nmse, router_experts, router_weights;
    std::vector<Handle> steps;  // parallel to kStepFields
    std::vector<Handle> kept, decode, decode_sink;
    std::vector<Handle> qk_queries, qk_keys, qk_lse;  // per layer, when the run records q/k
    std::map<std::string, Handle> maps;  // map datasets still receiving rows
    hsize_t n_steps = 0;
  };
  Handle file;  // declared first: destroyed after every object handle below
  Handle event_type;
  std::vector<Run> runs;
  std::string path;
};

Hdf5Writer::Hdf5Writer(const std::filesystem::path& path, const WriterOptions& options)
    : path_(path),
      options_(options),
      file_(path, existing_policy(options.force), "trace file"),
      state_(std::make_unique<State>()) {
  // HDF5 opens the file by name: the name is inside the AtomicFile's private folder, where nothing can
  // stand in for it, and the empty file there is ours (H5F_ACC_TRUNC keeps its inode).
  state_->path = file_.temp_path().string();
  thread_ = std::thread([this] { thread_main(); });
  auto created = std::make_shared<std::promise<void>>();
  auto done = created->get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({0, [this, created] {
                        try {
                          Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
                          // v1.8 objects allow dense attribute storage while any HDF5 >= 1.8 (and h5py) reads them.
                          H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
#if H5_VERSION_GE(1, 10, 7)
                          H5Pset_file_locking(fapl, true, true);
#endif
                          state_->file = Handle(h5::check(H5Fcreate(state_->path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl),
                                                          "cannot create trace file '" + path_.string() + "'"));
                          h5::set_attr(state_->file, "format", std::string(h5::kFormatName));
                          h5::set_attr(state_->file, "format_version", static_cast<int64_t>(h5::kFormatVersion));
                          h5::set_attr(state_->file, "created_by",
                                       std::string("kvscope ") + build_version() + " (" + build_git_commit() + ")");
                          h5::ensure_group(state_->file, "runs");
                          state_->event_type = event_memory_type();
                          H5Fflush(state_->file, H5F_SCOPE_LOCAL);
                          created->set_value();
                        } catch (...) {
                          created->set_exception(std::current_exception());
                        }
                      }});
  }
  not_empty_.notify_one();
  try {
    done.get();
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    not_empty_.notify_one();
    thread_.join();
    closed_ = true;
    throw;
  }
}

Hdf5Writer::~Hdf5Writer() {
  if (closed_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  not_empty_.notify_one();
  if (thread_.joinable()) thread_.join();
  file_.abandon();
}

void Hdf5Writer::thread_main() {
  h5::silence_errors();
  // The compute threads pack (compress) the maps themselves; what is left here is HDF5's bookkeeping and
  // the page-cache writes. On a machine whose cores the engine's OpenMP team fills, a writer of equal
  // priority preempts team threads and every parallel region then waits for the preempted one; at nice
  // 10 it mostly runs in the engine's gaps. Not the idle class: on a machine busy with other work (a
  // sweep of several traces, a build) an idle-class writer starves, the queue fills and the run stalls.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      not_empty_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    bool failed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failed = !error_.empty();
    }
    if (!failed) {
      try {
        task.fn();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex_);
        const std::string message = e.what();
        error_ = message.find(path_.string()) != std::string::npos ? message
                                                                   : "trace file '" + path_.string() + "': " + message;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queued_bytes_ -= task.bytes;
    }
    not_full_.notify_all();
  }
  // Objects first, then the file (State declares the file first so it is destroyed last).
  try {
    for (auto& run : state_->runs) H5Fflush(run.group, H5F_SCOPE_LOCAL);
  } catch (...) {
  }
  state_->runs.clear();
  state_->event_type.reset();
  state_->file.reset();
}

void Hdf5Writer::post(std::size_t bytes, std::function<void()> fn) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (closed_ || stopping_) throw Error("trace file '" + path_.string() + "' is already closed");
  if (!error_.empty()) throw Error(error_);
  auto has_room = [&] { return queue_.empty() || queued_bytes_ + bytes <= options_.queue_bytes || !error_.empty(); };
  if (!has_room()) {
    const auto start = std::chrono::steady_clock::now();
    not_full_.wait(lock, has_room);
    blocked_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  if (!error_.empty()) throw Error(error_);
  queued_bytes_ += bytes;
  queue_.push_back({bytes, std::move(fn)});
  lock.unlock();
  not_empty_.notify_one();
}

void Hdf5Writer::rethrow_if_failed() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_.empty()) throw Error(error_);
}

void Hdf5Writer::flush() {
  post(0, [this] { h5::check_status(H5Fflush(state_->file, H5F_SCOPE_LOCAL), "cannot flush"); });
}

void Hdf5Writer::sync() {
  auto done = std::make_shared<std::promise<void>>();
  auto future = done->get_future();
  post(0, [this, done] {
    H5Fflush(state_->file, H5F_SCOPE_LOCAL);
    done->set_value();
  });
  try {
    future.get();  // a failed writer drops the task, which breaks the promise
  } catch (const std::future_error&) {
  }
  rethrow_if_failed();
}

void Hdf5Writer::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) {
      if (!error_.empty()) throw Error(error_);
      return;
    }
    stopping_ = true;
  }
  not_empty_.notify_one();
  if (thread_.joinable()) thread_.join();
  closed_ = true;
  try {
    rethrow_if_failed();
  } catch (...) {
    file_.abandon();
    throw;
  }
  file_.commit();
}

namespace {
// Exact attention's inputs (docs/trace-format.md, `qk/`): per layer, datasets that grow by position.
void create_qk_group_datasets(hid_t run_group, const RunLayout& L, int gzip, std::vector<h5::Handle>& queries,
                              std::vector<h5::Handle>& keys, std::vector<h5::Handle>& lse) {
  const hsize_t unlimited = H5S_UNLIMITED, rows = 64;
  const hsize_t heads = static_cast<hsize_t>(L.n_heads), kv = static_cast<hsize_t>(L.n_kv_heads),
                d = static_cast<hsize_t>(L.head_dim);
  h5::Handle qk = h5::ensure_group(run_group, "qk");
  h5::set_attr(qk, "score_scale", L.qk_scale);
  // Which layers have a layer_LL group (`--record qk=layers:...`); readers take its absence as every layer.
  std::vector<int32_t> layers(L.qk_layers.begin(), L.qk_layers.end());
  if (layers.empty())
    for (int l = 0; l < L.n_layers; ++l) layers.push_back(l);
  h5::set_attr(qk, "layers", layers);
  if (L.qk_softcap > 0.0) h5::set_attr(qk, "score_softcap", L.qk_softcap);
  h5::set_attr(qk, "definition",
               std::string("per layer: post-RoPE queries [position][head][dim] and keys [position][kv_head][dim] (float16) "
                           "and each attention row's log-sum-exp lse [position][head] (float32, NaN: row not rebuildable). "
                           "Attention of query head h at row i to key j = exp(cap(score_scale * q_i.k_j) - lse_i) with k of KV "
                           "head h / (heads / kv_heads), for keys the row attended to (kept mask of the previous step, plus "
                           "the step's own positions up to i) whose key no merge had changed; cap(s) = score_softcap * "
                           "tanh(s / score_softcap) when that attribute is present (else s), and on a layer with a "
                           "sliding window (run attribute layer_windows) only keys j > i - window"));
  queries.resize(static_cast<std::size_t>(L.n_layers));
  keys.resize(static_cast<std::size_t>(L.n_layers));
  lse.resize(static_cast<std::size_t>(L.n_layers));
  for (int l : layers) {
    if (l < 0 || l >= L.n_layers) throw Error("q/k layer " + std::to_string(l) + " is outside the run's " + std::to_string(L.n_layers) + " layers");
    h5::Handle lg = h5::ensure_group(qk, indexed_name("layer_", l));
    queries[l] = h5::create_dataset(lg, "queries", {h5::half_type(), {0, heads, d}, {unlimited, heads, d}, {rows, heads, d},
                                                     gzip, {"position", "head", "dim"}});
    keys[l] = h5::create_dataset(lg, "keys", {h5::half_type(), {0, kv, d}, {unlimited, kv, d}, {rows, kv, d}, gzip,
                                               {"position", "kv_head", "dim"}});
    lse[l] = h5::create_dataset(lg, "lse", {H5T_IEEE_F32LE, {0, heads}, {unlimited, heads}, {rows * 16, heads}, gzip,
                                             {"position", "head"}});
  }
}
}  // namespace

int Hdf5Writer::begin_run(RunLayout layout) {
  if (layout.name.empty()) throw UsageError("a trace run needs a name");
  for (char c : layout.name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
      throw UsageError("run name '" + layout.name + "' may only hold letters, digits, '_', '-' and '.'");
  if (std::find(run_names_.begin(), run_names_.end(), layout.name) != run_names_.end())
    throw UsageError("trace file '" + path_.string() + "' already has a run named '" + layout.name + "'");
  run_names_.push_back(layout.name);
  const int id = static_cast<int>(run_names_.size()) - 1;
  auto shared = std::make_shared<RunLayout>(std::move(layout));
  post(shared->prompt_ids.size() * 8, [this, shared] {
    State& s = *state_;
    State::Run run;
    run.layout = *shared;
    const RunLayout& L = run.layout;
    run.group = h5::ensure_group(s.file, "runs/" + L.name);
    hid_t g = run.group;
    for (const auto& [key, value] : L.metadata) h5::set_attr(g, key, value);
    h5::set_attr(g, "name", L.name);
    h5::set_attr(g, "complete", static_cast<int64_t>(0));
    h5::set_attr(g, "n_layers", static_cast<int64_t>(L.n_layers));
    h5::set_attr(g, "n_heads", static_cast<int64_t>(L.n_heads));
    h5::set_attr(g, "n_kv_heads", static_cast<int64_t>(L.n_kv_heads));
    h5::set_attr(g, "head_dim", static_cast<int64_t>(L.head_dim));
    h5::set_attr(g, "prompt_length", static_cast<int64_t>(L.prompt_length));
    h5::set_attr(g, "max_positions", static_cast<int64_t>(L.max_positions));
    if (!L.layer_windows.empty()) h5::set_attr(g, "layer_windows", L.layer_windows);

    const hsize_t P = L.prompt_ids.size();
    const hsize_t unlimited = H5S_UNLIMITED;
    Handle tokens = h5::ensure_group(g, "tokens");
    {
      Handle d = h5::create_dataset(tokens, "prompt_ids", {H5T_STD_I32LE, {P}, {}, {std::max<hsize_t>(P, 1)}, options_.gzip_level, {"position"}});
      h5::write_slab(d, H5T_NATIVE_INT32, {0}, {P}, L.prompt_ids.data());
      std::size_t widest = 1;
      for (const auto& text : L.prompt_strings) widest = std::max(widest, text.size());
      Handle prompt_string_type = h5::fixed_string_type(widest);
      Handle st = h5::create_dataset(tokens, "prompt_strings",
                                     {prompt_string_type, {P}, {}, {std::max<hsize_t>(P, 1)}, 0, {"position"}});
      h5::set_attr(st, "definition", std::string("each prompt token decoded on its own (UTF-8)"));
      h5::write_strings(st, L.prompt_strings, 0);
    }
    run.generated_ids = h5::create_dataset(tokens, "generated_ids", {H5T_STD_I32LE, {0}, {unlimited}, {256}, options_.gzip_level, {"token"}});
    Handle generated_string_type = h5::fixed_string_type(kGeneratedTokenBytes);
    run.generated_strings = h5::create_dataset(
        tokens, "generated_strings", {generated_string_type, {0}, {unlimited}, {256}, options_.gzip_level, {"token"}});
    run.logprobs = h5::create_dataset(tokens, "logprobs", {H5T_IEEE_F32LE, {0}, {unlimited}, {256}, options_.gzip_level, {"token"}});
    h5::set_attr(run.logprobs, "units", std::string("natural log of the probability of each generated token"));

    Handle file_event_type(H5Tcopy(s.event_type));
    H5Tpack(file_event_type);
    run.events = h5::create_dataset(g, "events", {file_event_type, {0}, {unlimited}, {1024}, options_.gzip_level, {"event"}});
    h5::set_attr(run.events, "definition",
                 std::string("one row per cache entry leaving the cache: phase 0 prefill 1 decode; step = prefill block or "
                             "decode step index, so (phase, step) names a row of steps/ and of the kept-mask step axis; position = original token position; score, secondary_score "
                             "= the policy's scores of the entry (NaN: none); action evicted|merged; merge_target = "
                             "position of the entry it was merged into (-1 if evicted); merge_weight = its weight"));

    Handle steps = h5::ensure_group(g, "steps");
    for (const auto& f : kStepFields) {
      Handle d = h5::create_dataset(steps, f.name, {f.file_type, {0}, {unlimited}, {256}, options_.gzip_level, {"step"}});
      h5::set_attr(d, "units", std::string(f.units));
      run.steps.push_back(std::move(d));
    }

    const hsize_t kv = static_cast<hsize_t>(L.n_kv_heads), positions = static_cast<hsize_t>(L.max_positions);
    Handle kept = h5::ensure_group(g, "kept_mask");
    h5::set_attr(kept, "definition",
                 std::string("per layer [kv_head][position][step]: 1 kept, 0 evicted (or not yet seen), 2 merged away"));
    for (int l = 0; l < L.n_layers; ++l) {
      Handle d = h5::create_dataset(kept, indexed_name("layer_", l),
                                    {H5T_STD_U8LE, {kv, positions, 0}, {kv, positions, unlimited}, {kv, positions, 1}, options_.gzip_level,
                                     {"kv_head", "position", "step"}});
      run.kept.push_back(std::move(d));
    }
    if (L.decode_cols > 0) {
      Handle dec = h5::ensure_group(g, "decode_attention");
      h5::set_attr(dec, "definition",
                   std::string("per layer [decode_step][head][key block]: the decode query's attention probabilities over "
                               "key positions, pooled in blocks of col_block positions"));
      h5::set_attr(dec, "col_block", static_cast<int64_t>(L.decode_col_block));
      h5::set_attr(dec, "source_cols", static_cast<int64_t>(L.max_positions));
      h5::set_attr(dec, "pooling", std::string(pooling_name(L.decode_pooling)));
      const hsize_t heads = static_cast<hsize_t>(L.n_heads), cols = static_cast<hsize_t>(L.decode_cols);
      for (int l = 0; l < L.n_layers; ++l) {
        Handle d = h5::create_dataset(dec, indexed_name("layer_", l),
                                      {h5::half_type(), {0, heads, cols}, {unlimited, heads, cols}, {1, heads, cols}, options_.gzip_level,
                                       {"decode_step", "head", "key_block"}});
        h5::set_attr(d, "units", std::string("probability"));
        run.decode.push_back(std::move(d));
      }
      if (L.decode_sink) {
        Handle sink = h5::ensure_group(g, "decode_attention_sink");
        h5::set_attr(sink, "definition",
                     std::string("per layer [decode_step][head]: the head's sink logit's share of the decode query's "
                                 "softmax, 1 - the probabilities of the keys in the cache (gpt-oss)"));
        for (int l = 0; l < L.n_layers; ++l) {
          Handle d = h5::create_dataset(sink, indexed_name("layer_", l),
                                        {h5::half_type(), {0, heads}, {unlimited, heads}, {64, heads}, options_.gzip_level,
                                         {"decode_step", "head"}});
          h5::set_attr(d, "units", std::string("probability"));
          run.decode_sink.push_back(std::move(d));
        }
      }
    }
    if (L.nmse) {
      const hsize_t layers = static_cast<hsize_t>(L.n_layers);
      run.nmse = h5::create_dataset(g, "nmse", {H5T_IEEE_F32LE, {0, layers}, {unlimited, layers}, {64, layers}, options_.gzip_level,
                                                {"decode_step", "layer"}});
      h5::set_attr(run.nmse, "definition",
                   std::string("CAOTE Fig. 3: ||o_compressed - o_full||^2 / ||o_full||^2 of the layer's attention output "
                               "(all query heads concatenated), compressed cache vs a shadow full cache, same query"));
    }
    if (L.router_k > 0) {
      const hsize_t layers = static_cast<hsize_t>(L.n_layers), k = static_cast<hsize_t>(L.router_k);
      run.router_experts = h5::create_dataset(g, "router_experts",
                                              {H5T_STD_I16LE,
                                               {0, layers, k},
                                               {unlimited, layers, k},
                                               {256, layers, k},
                                               options_.gzip_level,
                                               {"position", "layer", "choice"}});
      h5::set_attr(run.router_experts, "definition",
                   std::string("the experts each layer's router chose for the token at this position (prompt tokens, "
                               "then generated tokens as they were fed back), most probable first: softmax over the "
                               "router logits, top k"));
      run.router_weights = h5::create_dataset(g, "router_weights",
                                              {H5T_IEEE_F32LE,
                                               {0, layers, k},
                                               {unlimited, layers, k},
                                               {256, layers, k},
                                               options_.gzip_level,
                                               {"position", "layer", "choice"}});
      h5::set_attr(
          run.router_weights, "definition",
          std::string("the factor on each chosen expert's output: its softmax probability, renormalised over the "
                      "k chosen where the model does (Mixtral; Qwen3-MoE with norm_topk_prob)"));
    }
    if (L.qk) create_qk_group_datasets(g, L, options_.gzip_level, run.qk_queries, run.qk_keys, run.qk_lse);
    H5Fflush(s.file, H5F_SCOPE_LOCAL);
    s.runs.push_back(std::move(run));
  });
  return id;
}

namespace {
void set_map_attrs(hid_t d, const Map2D& m, const std::string& units, const std::string& definition) {
  h5::set_attr(d, "source_rows", static_cast<int64_t>(m.source_rows));
  h5::set_attr(d, "source_cols", static_cast<int64_t>(m.source_cols));
  h5::set_attr(d, "row_block", static_cast<int64_t>(m.row_block));
  h5::set_attr(d, "col_block", static_cast<int64_t>(m.col_block));
  h5::set_attr(d, "pooling", std::string(pooling_name(m.pooling)));
  h5::set_attr(d, "units", units);
  h5::set_attr(d, "definition", definition);
  if (!m.source_positions.empty()) h5::set_attr(d, "source_positions", m.source_positions);
}

// Maps are stored in 64 x 64 chunks: small enough that the chunks above the diagonal of a causal (or
// lower-triangle) map hold only zeros and are never written, large enough to compress well.
std::vector<hsize_t> map_chunk_shape(hsize_t rows, hsize_t cols) {
  return {std::clamp<hsize_t>(rows, 1, 64), std::clamp<hsize_t>(cols, 1, 64)};
}

Handle create_map_dataset(hid_t group, const std::string& path, const Map2D& m, int gzip) {
  const auto slash = path.rfind('/');
  Handle parent = h5::ensure_group(group, slash == std::string::npos ? "" : path.substr(0, slash));
  const std::string leaf = slash == std::string::npos ? path : path.substr(slash + 1);
  const hsize_t rows = static_cast<hsize_t>(m.rows), cols = static_cast<hsize_t>(m.cols);
  return h5::create_dataset(parent, leaf, {h5::half_type(), {rows, cols}, {}, map_chunk_shape(rows, cols), gzip, {"query", "key"}});
}

// How the caller's thread packs a map's chunks (create_dataset gives half maps shuffle + deflate).
std::optional<h5::ChunkLayout> map_layout(const Map2D& m, int gzip) {
  if (gzip <= 0 || m.rows <= 0 || m.cols <= 0) return std::nullopt;
  const hsize_t rows = static_cast<hsize_t>(m.rows), cols = static_cast<hsize_t>(m.cols);
  return h5::ChunkLayout{{rows, cols}, map_chunk_shape(rows, cols), sizeof(uint16_t), true, gzip};
}

// A block of map rows as the writer thread receives it: packed chunks when the caller could pack them,
// otherwise the half floats for H5Dwrite.
struct MapRows {
  std::optional<std::vector<h5::PackedChunk>> chunks;
  std::vector<uint16_t> half;
  std::size_t bytes() const {
    if (!chunks) return half.size() * sizeof(uint16_t);
    std::size_t n = 0;
    for (const auto& c : *chunks) n += c.bytes.size();
    return n;
  }
};

MapRows pack_map_rows(const std::optional<h5::ChunkLayout>& layout, int first_row, int n_rows, std::vector<uint16_t> half) {
  MapRows rows;
  if (layout && n_rows > 0) {
    const hsize_t cols = half.size() / static_cast<std::size_t>(n_rows);
    rows.chunks = h5::pack_chunks(*layout, {static_cast<hsize_t>(first_row), 0}, {static_cast<hsize_t>(n_rows), cols},
                                  half.data(), true);
  }
  if (!rows.chunks) rows.half = std::move(half);
  return rows;
}

void write_map_rows_now(hid_t dataset, const MapRows& rows, int first_row, int n_rows) {
  if (rows.chunks) {
    h5::write_packed_chunks(dataset, *rows.chunks);
    return;
  }
  const hsize_t cols = n_rows > 0 ? rows.half.size() / static_cast<std::size_t>(n_rows) : 0;
  h5::write_slab(dataset, h5::half_type(), {static_cast<hsize_t>(first_row), 0}, {static_cast<hsize_t>(n_rows), cols},
                 rows.half.data());
}
}  // namespace

void Hdf5Writer::create_map(int run, const MapSlot& slot, const Map2D& shape, const std::string& units,
                            const std::string& definition) {
  const std::string dataset = map_dataset_path(slot);
  Map2D meta = shape;
  meta.values.clear();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto layout = map_layout(meta, options_.gzip_level)) map_layouts_[{run, dataset}] = *layout;
  }
  post(64, [this, run, dataset, meta, units, definition] {
    auto& r = state_->runs.at(run);
    Handle d = create_map_dataset(r.group, dataset, meta, options_.gzip_level);
    set_map_attrs(d, meta, units, definition);
    r.maps[dataset] = std::move(d);
  });
}

void Hdf5Writer::write_map_rows(int run, const MapSlot& slot, int first_row, int n_rows, std::span<const float> values) {
  const std::string dataset = map_dataset_path(slot);
  std::vector<uint16_t> half_values = to_half(values.data(), values.size());
  // Packing (the costly part) happens here, on the caller's thread: the attention threads pack their
  // own heads' maps side by side, and the writer thread only stores the chunks.
  std::optional<h5::ChunkLayout> layout;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = map_layouts_.find({run, dataset}); it != map_layouts_.end()) {
      layout = it->second;
      if (static_cast<hsize_t>(first_row + n_rows) >= layout->dims[0]) map_layouts_.erase(it);  // its last rows
    }
  }
  auto rows = std::make_shared<MapRows>(pack_map_rows(layout, first_row, n_rows, std::move(half_values)));
  post(rows->bytes(), [this, run, dataset, first_row, n_rows, rows] {
    auto& r = state_->runs.at(run);
    auto it = r.maps.find(dataset);
    if (it == r.maps.end()) throw Error("map '" + dataset + "' of run '" + r.layout.name + "' was never created");
    write_map_rows_now(it->second, *rows, first_row, n_rows);
    // A finished map is closed at once: an open dataset keeps its chunks in its own cache (up to 1 MiB).
    if (static_cast<hsize_t>(first_row + n_rows) >= h5::dataset_dims(it->second).at(0)) r.maps.erase(it);
  });
}

void Hdf5Writer::write_map(int run, const MapSlot& slot, const Map2D& map, const std::string& units,
                           const std::string& definition, bool lower_triangle) {
  const std::string dataset = map_dataset_path(slot);
  // Converted and packed on the caller's thread, like write_map_rows.
  auto half = to_half(map.values.data(), map.values.size());
  const bool triangle = lower_triangle && map.rows == map.cols;
  if (triangle)
    for (int i = 0; i < map.rows; ++i)
      std::fill(half.begin() + static_cast<std::ptrdiff_t>(i) * map.cols + i + 1,
                half.begin() + static_cast<std::ptrdiff_t>(i + 1) * map.cols, uint16_t{0});
  Map2D meta = map;
  meta.values.clear();
  auto rows = std::make_shared<MapRows>(pack_map_rows(map_layout(meta, options_.gzip_level), 0, map.rows, std::move(half)));
  post(rows->bytes(), [this, run, dataset, meta, rows, units, definition, triangle] {
    auto& r = state_->runs.at(run);
    Handle d = create_map_dataset(r.group, dataset, meta, options_.gzip_level);
    set_map_attrs(d, meta, units, definition);
    if (triangle) h5::set_attr(d, "stored", std::string("lower_triangle"));
    write_map_rows_now(d, *rows, 0, meta.rows);
  });
}

void Hdf5Writer::write_stat(int run, const std::string& name, const LayerHeadStat& stat) {
  auto shared = std::make_shared<LayerHeadStat>(stat);
  post(64, [this, run, name, shared] {
    auto& r = state_->runs.at(run);
    Handle group = h5::ensure_group(r.group, "stats");
    const hsize_t layers = shared->values.size(), heads = layers ? shared->values[0].size() : 0;
    std::vector<double> flat;
    for (const auto& row : shared->values) {
      if (row.size() != heads) throw Error("stat '" + name + "' has rows of different lengths");
      flat.insert(flat.end(), row.begin(), row.end());
    }
    Handle d = h5::create_dataset(group, name, {H5T_IEEE_F64LE, {layers, heads}, {}, {}, 0, {"layer", "head"}});
    h5::write_slab(d, H5T_NATIVE_DOUBLE, {0, 0}, {layers, heads}, flat.data());
    h5::set_attr(d, "definition", shared->description);
  });
}

void Hdf5Writer::write_layer_stat(int run, const std::string& name, const LayerStat& stat) {
  auto shared = std::make_shared<LayerStat>(stat);
  post(64, [this, run, name, shared] {
    auto& r = state_->runs.at(run);
    Handle group = h5::ensure_group(r.group, "stats");
    const hsize_t layers = shared->values.size();
    Handle d = h5::create_dataset(group, name, {H5T_IEEE_F64LE, {layers}, {}, {}, 0, {"layer"}});
    h5::write_slab(d, H5T_NATIVE_DOUBLE, {0}, {layers}, shared->values.data());
    h5::set_attr(d, "definition", shared->description);
  });
}

void Hdf5Writer::write_series(int run, const std::string& name, const policy::Series& series) {
  auto shared = std::make_shared<policy::Series>(series);
  post(series.values.size() * 8, [this, run, name, shared] {
    auto& r = state_->runs.at(run);
    Handle group = h5::ensure_group(r.group, "policy");
    std::vector<hsize_t> dims;
    for (int d : shared->shape) dims.push_back(static_cast<hsize_t>(std::max(d, 0)));
    hsize_t count = 1;
    for (hsize_t d : dims) count *= d;
    if (dims.empty() || count != shared->values.size()) dims = {shared->values.size()};
    Handle d = h5::create_dataset(group, name, {H5T_IEEE_F64LE, dims, {}, {}, 0, shared->dims});
    h5::write_slab(d, H5T_NATIVE_DOUBLE, std::vector<hsize_t>(dims.size(), 0), dims, shared->values.data());
    h5::set_attr(d, "description", shared->description);
    std::string joined;
    for (std::size_t i = 0; i < shared->dims.size(); ++i) joined += (i ? "," : "") + shared->dims[i];
    h5::set_attr(d, "dims", joined);
  });
}

void Hdf5Writer::write_layer_budgets(int run, const std::vector<int>& budgets) {
  std::vector<int32_t> values(budgets.begin(), budgets.end());
  post(64, [this, run, values] {
    auto& r = state_->runs.at(run);
    Handle group = h5::ensure_group(r.group, "budgets");
    const hsize_t n = values.size();
    Handle d = h5::create_dataset(group, "layer_budgets", {H5T_STD_I32LE, {n}, {}, {}, 0, {"layer"}});
    h5::write_slab(d, H5T_NATIVE_INT32, {0}, {n}, values.data());
    h5::set_attr(d, "units", std::string("tokens per (layer, kv head) at the end of the run"));
  });
}

void Hdf5Writer::append_step(int run, StepRecord record) {
  std::size_t bytes = record.events.size() * sizeof(Event) + record.decode_attention.size() * 2 +
                      record.decode_attention_sink.size() * 2 + record.nmse.size() * 4;
  for (const TokenRouting& token : record.routing) bytes += token.experts.size() * 6;
  for (const auto& k : record.kept) bytes += k.size();
  auto decode_half = std::make_shared<std::vector<uint16_t>>(to_half(record.decode_attention.data(), record.decode_attention.size()));
  record.decode_attention.clear();
  auto shared = std::make_shared<StepRecord>(std::move(record));
  post(bytes, [this, run, shared, decode_half] {
    State& s = *state_;
    auto& r = s.runs.at(run);
    const StepRecord& rec = *shared;
    const StepStats& st = rec.stats;
    const void* fields[] = {&st.phase, &st.step, &st.seq_len, &st.cache_bytes, &st.cache_entries, &st.ms, &st.token};
    for (std::size_t i = 0; i < r.steps.size(); ++i) h5::append_rows(r.steps[i], kStepFields[i].mem_type, 1, fields[i]);
    h5::append_rows(r.events, s.event_type, rec.events.size(), rec.events.data());
    const hsize_t step = r.n_steps;
    const hsize_t kv = static_cast<hsize_t>(r.layout.n_kv_heads), positions = static_cast<hsize_t>(r.layout.max_positions);
    for (std::size_t l = 0; l < r.kept.size() && l < rec.kept.size(); ++l) {
      h5::extend(r.kept[l], 2, step + 1);
      h5::write_slab(r.kept[l], H5T_NATIVE_UINT8, {0, 0, step}, {kv, positions, 1}, rec.kept[l].data());
    }
    for (std::size_t l = 0; l < r.kept.size(); ++l) h5::extend(r.kept[l], 2, step + 1);
    if (rec.has_token) {
      h5::append_rows(r.generated_ids, H5T_NATIVE_INT32, 1, &rec.token);
      const hsize_t n = h5::dataset_dims(r.generated_strings)[0];
      h5::extend(r.generated_strings, 0, n + 1);
      h5::write_strings(r.generated_strings, {rec.token_string}, n);
      h5::append_rows(r.logprobs, H5T_NATIVE_FLOAT, 1, &rec.logprob);
    }
    if (!decode_half->empty() && !r.decode.empty()) {
      const std::size_t per_layer = decode_half->size() / r.decode.size();
      for (std::size_t l = 0; l < r.decode.size(); ++l)
        h5::append_rows(r.decode[l], h5::half_type(), 1, decode_half->data() + l * per_layer);
    }
    if (!rec.decode_attention_sink.empty() && !r.decode_sink.empty()) {
      const std::vector<uint16_t> half = to_half(rec.decode_attention_sink.data(), rec.decode_attention_sink.size());
      const std::size_t per_layer = half.size() / r.decode_sink.size();
      for (std::size_t l = 0; l < r.decode_sink.size(); ++l)
        h5::append_rows(r.decode_sink[l], h5::half_type(), 1, half.data() + l * per_layer);
    }
    if (!rec.nmse.empty() && r.nmse.valid()) h5::append_rows(r.nmse, H5T_NATIVE_FLOAT, 1, rec.nmse.data());
    if (r.router_experts.valid())
      for (const TokenRouting& token : rec.routing) {
        h5::append_rows(r.router_experts, H5T_NATIVE_INT16, 1, token.experts.data());
        h5::append_rows(r.router_weights, H5T_NATIVE_FLOAT, 1, token.weights.data());
      }
    ++r.n_steps;
    h5::check_status(H5Fflush(s.file, H5F_SCOPE_LOCAL), "cannot flush after step " + std::to_string(step));
  });
}

void Hdf5Writer::append_qk(int run, const QKSpanRef& span) {
  std::size_t bytes = 0;
  for (const auto& l : span->layers) bytes += (l.queries.size() + l.keys.size()) * 2 + l.lse.size() * 4;
  post(bytes, [this, run, span] {
    auto& r = state_->runs.at(run);
    const auto recorded = std::find_if(r.qk_lse.begin(), r.qk_lse.end(), [](const h5::Handle& h) { return h.valid(); });
    if (recorded == r.qk_lse.end()) throw Error("run '" + r.layout.name + "' was begun without q/k datasets");
    const hsize_t first = h5::dataset_dims(*recorded)[0];
    if (first != static_cast<hsize_t>(span->first_position))
      throw Error("q/k span starts at position " + std::to_string(span->first_position) + ", the file holds " +
                  std::to_string(first));
    const hsize_t n = static_cast<hsize_t>(span->n_positions);
    for (std::size_t l = 0; l < r.qk_queries.size() && l < span->layers.size(); ++l) {
      if (!r.qk_queries[l].valid()) continue;  // a layer not recorded
      const QKSpan::Layer& layer = span->layers[l];
      if (layer.lse.size() != static_cast<std::size_t>(n) * r.layout.n_heads)
        throw Error("run '" + r.layout.name + "': the q/k span holds no data for layer " + std::to_string(l) +
                    ", which the file records");
      h5::append_rows(r.qk_queries[l], h5::half_type(), n, layer.queries.data());
      h5::append_rows(r.qk_keys[l], h5::half_type(), n, layer.keys.data());
      h5::append_rows(r.qk_lse[l], H5T_NATIVE_FLOAT, n, layer.lse.data());
    }
  });
}

void Hdf5Writer::end_run(int run, const std::map<std::string, std::string>& final_metadata) {
  post(64, [this, run, final_metadata] {
    auto& r = state_->runs.at(run);
    for (const auto& [key, value] : final_metadata) h5::set_attr(r.group, key, value);
    r.maps.clear();
    h5::set_attr(r.group, "complete", static_cast<int64_t>(1));
    h5::check_status(H5Fflush(state_->file, H5F_SCOPE_LOCAL), "cannot flush run '" + r.layout.name + "'");
  });
  rethrow_if_failed();
}

}  // namespace kvscope::trace

namespace kvscope::trace {

int Hdf5Writer::run_id(const std::string& run) const {
  const auto it = std::find(run_names_.begin(), run_names_.end(), run);
  if (it == run_names_.end())
    throw UsageError("trace file '" + path_.string() + "' has no run named '" + run + "' to add to");
  return static_cast<int>(it - run_names_.begin());
}

template <typename T>
void Hdf5Writer::set_run_attribute_of(const std::string& run, const std::string& name, T value) {
  const int id = run_id(run);
  post(64 + name.size(), [this, id, name, value] { h5::set_attr(state_->runs.at(id).group, name, value); });
}

void Hdf5Writer::set_run_attribute(const std::string& run, const std::string& name, const std::string& value) {
  set_run_attribute_of(run, name, value);
}
void Hdf5Writer::set_run_attribute(const std::string& run, const std::string& name, int64_t value) {
  set_run_attribute_of(run, name, value);
}
void Hdf5Writer::set_run_attribute(const std::string& run, const std::string& name, double value) {
  set_run_attribute_of(run, name, value);
}

namespace {
std::size_t element_count(const std::vector<std::size_t>& dims) {
  std::size_t n = 1;
  for (std::size_t d : dims) n *= d;
  return n;
}
template <typename T>
std::vector<char> bytes_of(const std::vector<T>& values) {
  const char* p = reinterpret_cast<const char*>(values.data());
  return {p, p + values.size() * sizeof(T)};
}
}  // namespace

void Hdf5Writer::write_run_dataset(const std::string& run, const std::string& path,
                                   const std::vector<std::size_t>& dims, const std::vector<int32_t>& values,
                                   const std::vector<std::string>& labels) {
  if (element_count(dims) != values.size())
    throw Error("dataset '" + path + "' of run '" + run + "': " + std::to_string(values.size()) +
                " values do not fill its shape");
  write_run_bytes(run, path, dims, bytes_of(values), ElementType::Int32, 0, labels);
}

void Hdf5Writer::write_run_dataset(const std::string& run, const std::string& path,
                                   const std::vector<std::size_t>& dims, const std::vector<double>& values,
                                   const std::vector<std::string>& labels) {
  if (element_count(dims) != values.size())
    throw Error("dataset '" + path + "' of run '" + run + "': " + std::to_string(values.size()) +
                " values do not fill its shape");
  write_run_bytes(run, path, dims, bytes_of(values), ElementType::Float64, 0, labels);
}

void Hdf5Writer::write_run_strings(const std::string& run, const std::string& path,
                                   const std::vector<std::string>& values, const std::string& label) {
  std::size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size());
  std::vector<char> packed(values.size() * width, '\0');
  for (std::size_t i = 0; i < values.size(); ++i)
    std::copy(values[i].begin(), values[i].end(), packed.begin() + static_cast<std::ptrdiff_t>(i * width));
  write_run_bytes(run, path, {values.size()}, std::move(packed), ElementType::FixedString, width, {label});
}

void Hdf5Writer::write_run_bytes(const std::string& run, const std::string& path, std::vector<std::size_t> dims,
                                 std::vector<char> data, ElementType type, std::size_t string_width,
                                 std::vector<std::string> labels) {
  const int id = run_id(run);
  auto shared = std::make_shared<std::vector<char>>(std::move(data));
  post(shared->size() + 64, [this, id, path, dims, shared, type, string_width, labels] {
    auto& r = state_->runs.at(id);
    const auto slash = path.rfind('/');
    Handle parent = slash == std::string::npos ? Handle(H5Gopen2(r.group, ".", H5P_DEFAULT))
                                               : h5::ensure_group(r.group, path.substr(0, slash));
    const std::string leaf = slash == std::string::npos ? path : path.substr(slash + 1);
    Handle string_type;
    hid_t file_type = H5T_STD_I32LE, memory_type = H5T_NATIVE_INT32;
    if (type == ElementType::Float64) file_type = H5T_IEEE_F64LE, memory_type = H5T_NATIVE_DOUBLE;
    if (type == ElementType::FixedString) {
      string_type = h5::fixed_string_type(string_width);
      file_type = memory_type = string_type;
    }
    const std::vector<hsize_t> extent(dims.begin(), dims.end());
    Handle d = h5::create_dataset(parent, leaf, {file_type, extent, {}, {}, 0, labels});
    if (!shared->empty())
      h5::write_slab(d, memory_type, std::vector<hsize_t>(extent.size(), 0), extent, shared->data());
  });
  rethrow_if_failed();
}

}  // namespace kvscope::trace
