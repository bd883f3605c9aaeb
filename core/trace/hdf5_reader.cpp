#include "core/trace/hdf5_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <functional>

#include "core/common/error.h"
#include "core/trace/hdf5_util.h"
#include "core/trace/trace_names.h"

namespace kvscope::trace {

using h5::Handle;

namespace {

// "layer_07" -> 7; -1 when the name does not have that form.
int index_after(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return -1;
  for (std::size_t i = prefix.size(); i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  return std::stoi(name.substr(prefix.size()));
}

Handle open_dataset(hid_t loc, const std::string& path) {
  return Handle(h5::check(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), "cannot open dataset '" + path + "' in '" + h5::name_of(loc) + "'"));
}

Handle open_group(hid_t loc, const std::string& path) {
  return Handle(h5::check(H5Gopen2(loc, path.c_str(), H5P_DEFAULT), "cannot open group '" + path + "' in '" + h5::name_of(loc) + "'"));
}

Pooling parse_pooling(const std::string& s) { return s == "mean" ? Pooling::Mean : Pooling::Max; }

Map2D read_map(hid_t dataset) {
  Map2D m;
  const auto dims = h5::dataset_dims(dataset);
  if (dims.size() != 2) throw Error("map '" + h5::name_of(dataset) + "' has rank " + std::to_string(dims.size()) + ", expected 2");
  m.rows = static_cast<int>(dims[0]);
  m.cols = static_cast<int>(dims[1]);
  m.source_rows = static_cast<int>(h5::get_int_attr(dataset, "source_rows").value_or(m.rows));
  m.source_cols = static_cast<int>(h5::get_int_attr(dataset, "source_cols").value_or(m.cols));
  m.row_block = static_cast<int>(h5::get_int_attr(dataset, "row_block").value_or(1));
  m.col_block = static_cast<int>(h5::get_int_attr(dataset, "col_block").value_or(1));
  m.pooling = parse_pooling(h5::get_string_attr(dataset, "pooling").value_or("max"));
  m.source_positions = h5::get_int_array_attr(dataset, "source_positions");
  m.values = h5::read_floats(dataset);
  if (h5::get_string_attr(dataset, "stored").value_or("") == "lower_triangle" && m.rows == m.cols)
    for (int i = 0; i < m.rows; ++i)
      for (int j = i + 1; j < m.cols; ++j)
        m.values[static_cast<std::size_t>(i) * m.cols + j] = m.values[static_cast<std::size_t>(j) * m.cols + i];
  return m;
}

struct Opened {
  Handle file;
  std::map<std::string, std::string> attributes;
};

Opened open_trace(const std::filesystem::path& path) {
  h5::silence_errors();
  const std::string p = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error("trace file '" + p + "' does not exist");
  if (std::filesystem::is_directory(path, ec)) throw Error("trace file '" + p + "' is a directory");
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size == 0) throw Error("trace file '" + p + "' is empty (0 bytes): not an HDF5 file");
  const htri_t is_hdf5 = H5Fis_hdf5(p.c_str());
  if (is_hdf5 <= 0) {
    const std::string reason = h5::last_error();
    throw Error("trace file '" + p + "' is not an HDF5 file (no HDF5 signature found" +
                (is_hdf5 < 0 && !reason.empty() ? "; HDF5: " + reason : std::string()) + ")");
  }
  Opened o;
  o.file = h5::open_read_only(p);
  if (!o.file.valid()) {
    const std::string reason = h5::last_error();
    throw Error("cannot open trace file '" + p + "': it looks truncated or damaged (HDF5: " + reason + ")");
  }
  o.attributes = h5::all_attrs_as_text(o.file);
  const auto format = h5::get_string_attr(o.file, "format");
  if (!format || *format != h5::kFormatName)
    throw Error("'" + p + "' is an HDF5 file but not a kvscope trace: the root attribute 'format' is " +
                (format ? "'" + *format + "'" : std::string("missing")) + ", expected '" + h5::kFormatName + "'");
  const auto version = h5::get_int_attr(o.file, "format_version");
  if (!version) throw Error("trace file '" + p + "': root attribute 'format_version' is missing");
  if (*version > h5::kFormatVersion)
    throw Error("trace file '" + p + "' has format_version " + std::to_string(*version) + "; this kvscope reads up to " +
                std::to_string(h5::kFormatVersion));
  if (!h5::exists(o.file, "runs")) throw Error("trace file '" + p + "' has no '/runs' group");
  return o;
}

// The whole `qk/` group as one span from position 0. Shapes are checked against the run's so a damaged
// file gives an error here rather than a wrong cell later.
void read_qk(hid_t qk, RunTrace& r) {
  auto span = std::make_shared<QKSpan>();
  const auto scale = h5::get_double_attr(qk, "score_scale");
  if (!scale || !(*scale > 0.0)) throw Error("'" + h5::name_of(qk) + "' has no positive attribute 'score_scale'");
  // `layers` names the layers recorded (`--record qk=layers:...`); files written before it hold every layer.
  std::vector<int> layers;
  for (int32_t l : h5::get_int_array_attr(qk, "layers")) {
    if (l < 0 || l >= r.n_layers || (!layers.empty() && l <= layers.back()))
      throw Error("'" + h5::name_of(qk) + "': attribute 'layers' must list layers of 0.." + std::to_string(r.n_layers - 1) +
                  " in increasing order; it holds " + std::to_string(l) + " out of place");
    layers.push_back(l);
  }
  const bool every_layer = layers.empty() || static_cast<int>(layers.size()) == r.n_layers;
  span->layers.resize(static_cast<std::size_t>(std::max(0, r.n_layers)));
  bool first = true;
  for (int l = 0; l < r.n_layers; ++l) {
    if (!every_layer && !std::binary_search(layers.begin(), layers.end(), l)) continue;
    Handle lg = open_group(qk, indexed_name("layer_", l));
    Handle q = open_dataset(lg, "queries"), k = open_dataset(lg, "keys"), lse = open_dataset(lg, "lse");
    const auto qd = h5::dataset_dims(q), kd = h5::dataset_dims(k), ld = h5::dataset_dims(lse);
    const std::vector<hsize_t> want_q{qd.empty() ? 0 : qd[0], static_cast<hsize_t>(r.n_heads), static_cast<hsize_t>(r.head_dim)};
    const std::vector<hsize_t> want_k{want_q[0], static_cast<hsize_t>(r.n_kv_heads), want_q[2]};
    const std::vector<hsize_t> want_lse{want_q[0], want_q[1]};
    if (qd != want_q || kd != want_k || ld != want_lse)
      throw Error("'" + h5::name_of(lg) + "': queries, keys and lse disagree with each other or with the run's shape (" +
                  std::to_string(r.n_heads) + " heads, " + std::to_string(r.n_kv_heads) + " kv heads, head_dim " +
                  std::to_string(r.head_dim) + ")");
    if (!first && static_cast<int>(want_q[0]) != span->n_positions)
      throw Error("'" + h5::name_of(lg) + "' holds " + std::to_string(want_q[0]) + " positions, layer " +
                  std::to_string(every_layer ? 0 : layers.front()) + " holds " + std::to_string(span->n_positions));
    first = false;
    span->n_positions = static_cast<int>(want_q[0]);
    span->layers[static_cast<std::size_t>(l)] = {h5::read_half_bits(q), h5::read_half_bits(k), h5::read_floats(lse)};
  }
  r.qk_scale = *scale;
  if (!every_layer) r.qk_layers = layers;
  r.qk_softcap = h5::get_double_attr(qk, "score_softcap").value_or(0.0);
  if (span->n_positions > 0) r.qk.push_back(std::move(span));
}

void read_run_body(hid_t g, RunTrace& r, const ReadOptions& options, const std::function<void(const std::string&)>& skip) {
  // Each part is read on its own so that a damaged object of an incomplete run costs only that part.
  auto part = [&](const std::string& what, const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      skip(what + ": " + e.what());
    }
  };
  auto have = [&](const std::string& path) { return h5::exists(g, path); };

  part("tokens", [&] {
    if (have("tokens/prompt_ids")) r.prompt_ids = h5::read_ints(open_dataset(g, "tokens/prompt_ids"));
    if (have("tokens/prompt_strings")) r.prompt_strings = h5::read_strings(open_dataset(g, "tokens/prompt_strings"));
    if (have("tokens/generated_ids")) r.generated_ids = h5::read_ints(open_dataset(g, "tokens/generated_ids"));
    if (have("tokens/generated_strings")) r.generated_strings = h5::read_strings(open_dataset(g, "tokens/generated_strings"));
    if (have("tokens/logprobs")) r.logprobs = h5::read_floats(open_dataset(g, "tokens/logprobs"));
  });

  for (const char* group : {"attention", "attention_sink"}) {
    if (!options.maps || !have(group)) continue;
    part(group, [&] {
      auto& table = std::string(group) == "attention" ? r.attention : r.attention_sink;
      Handle att = open_group(g, group);
      for (const auto& layer_name : h5::list_group(att)) {
        const int layer = index_after(layer_name, "layer_");
        if (layer < 0) continue;
        Handle lg = open_group(att, layer_name);
        for (const auto& head_name : h5::list_group(lg)) {
          const int head = index_after(head_name, "head_");
          if (head < 0) continue;
          table[{layer, head}] = std::make_shared<const Map2D>(read_map(open_dataset(lg, head_name)));
        }
      }
    });
  }
  if (options.maps && have("decode_attention")) {
    part("decode_attention", [&] {
      Handle dec = open_group(g, "decode_attention");
      const int col_block = static_cast<int>(h5::get_int_attr(dec, "col_block").value_or(1));
      const int source_cols = static_cast<int>(h5::get_int_attr(dec, "source_cols").value_or(0));
      const Pooling pooling = parse_pooling(h5::get_string_attr(dec, "pooling").value_or("max"));
      for (const auto& layer_name : h5::list_group(dec)) {
        const int layer = index_after(layer_name, "layer_");
        if (layer < 0) continue;
        Handle d = open_dataset(dec, layer_name);
        const auto dims = h5::dataset_dims(d);
        if (dims.size() != 3) throw Error("'" + h5::name_of(d) + "' should have rank 3 [decode_step][head][key_block]");
        const std::vector<float> all = h5::read_floats(d);
        const int steps = static_cast<int>(dims[0]), heads = static_cast<int>(dims[1]), cols = static_cast<int>(dims[2]);
        for (int h = 0; h < heads; ++h) {
          auto m = std::make_shared<Map2D>();
          m->rows = m->source_rows = steps;
          m->cols = cols;
          m->source_cols = source_cols > 0 ? source_cols : cols * col_block;
          m->col_block = col_block;
          m->pooling = pooling;
          m->values.resize(static_cast<std::size_t>(steps) * cols);
          for (int s = 0; s < steps; ++s)
            std::copy_n(all.begin() + (static_cast<std::size_t>(s) * heads + h) * cols, cols,
                        m->values.begin() + static_cast<std::size_t>(s) * cols);
          r.decode_attention[{layer, h}] = std::move(m);
        }
      }
    });
  }
  if (options.maps && have("decode_attention_sink")) {
    part("decode_attention_sink", [&] {
      Handle sink = open_group(g, "decode_attention_sink");
      for (const auto& layer_name : h5::list_group(sink)) {
        const int layer = index_after(layer_name, "layer_");
        if (layer < 0) continue;
        Handle d = open_dataset(sink, layer_name);
        const auto dims = h5::dataset_dims(d);
        if (dims.size() != 2) throw Error("'" + h5::name_of(d) + "' should have rank 2 [decode_step][head]");
        const std::vector<float> all = h5::read_floats(d);
        const int steps = static_cast<int>(dims[0]), heads = static_cast<int>(dims[1]);
        for (int h = 0; h < heads; ++h) {
          auto m = std::make_shared<Map2D>();
          m->rows = m->source_rows = steps;
          m->cols = m->source_cols = 1;
          m->values.resize(static_cast<std::size_t>(steps));
          for (int s = 0; s < steps; ++s) m->values[static_cast<std::size_t>(s)] = all[static_cast<std::size_t>(s) * heads + h];
          r.decode_attention_sink[{layer, h}] = std::move(m);
        }
      }
    });
  }
  for (const char* kind : {"keys", "values"}) {
    const std::string base = std::string("similarity/") + kind;
    if (!options.maps || !have(base)) continue;
    part(base, [&] {
      auto& table = std::string(kind) == "keys" ? r.key_similarity : r.value_similarity;
      Handle sg = open_group(g, base);
      for (const auto& layer_name : h5::list_group(sg)) {
        const int layer = index_after(layer_name, "layer_");
        if (layer < 0) continue;
        Handle lg = open_group(sg, layer_name);
        for (const auto& head_name : h5::list_group(lg)) {
          const int kv = index_after(head_name, "kv_head_");
          if (kv < 0) continue;
          table[{layer, kv}] = std::make_shared<const Map2D>(read_map(open_dataset(lg, head_name)));
        }
      }
    });
  }
  if (have("stats")) {
    part("stats", [&] {
      Handle sg = open_group(g, "stats");
      for (const auto& name : h5::list_group(sg)) {
        Handle d = open_dataset(sg, name);
        const auto dims = h5::dataset_dims(d);
        const std::vector<double> v = h5::read_doubles(d);
        const std::string description = h5::get_string_attr(d, "definition").value_or("");
        if (dims.size() == 2) {
          LayerHeadStat s;
          s.description = description;
          for (hsize_t l = 0; l < dims[0]; ++l)
            s.values.emplace_back(v.begin() + static_cast<std::ptrdiff_t>(l * dims[1]), v.begin() + static_cast<std::ptrdiff_t>((l + 1) * dims[1]));
          r.stats[name] = std::move(s);
        } else if (dims.size() == 1) {
          r.layer_stats[name] = LayerStat{v, description};
        }
      }
    });
  }
  if (have("budgets/layer_budgets")) {
    part("budgets", [&] {
      const auto v = h5::read_ints(open_dataset(g, "budgets/layer_budgets"));
      r.layer_budgets.assign(v.begin(), v.end());
    });
  }
  if (have("policy")) {
    part("policy", [&] {
      Handle pg = open_group(g, "policy");
      for (const auto& name : h5::list_group(pg)) {
        Handle d = open_dataset(pg, name);
        policy::Series s;
        s.values = h5::read_doubles(d);
        for (hsize_t x : h5::dataset_dims(d)) s.shape.push_back(static_cast<int>(x));
        s.description = h5::get_string_attr(d, "description").value_or("");
        const std::string dims = h5::get_string_attr(d, "dims").value_or("");
        std::size_t start = 0;
        while (!dims.empty() && start <= dims.size()) {
          const std::size_t end = std::min(dims.find(',', start), dims.size());
          s.dims.push_back(dims.substr(start, end - start));
          start = end + 1;
        }
        r.policy_series[name] = std::move(s);
      }
    });
  }
  if (have("events")) {
    part("events", [&] {
      Handle d = open_dataset(g, "events");
      const hsize_t n = h5::dataset_dims(d).at(0);
      std::vector<Event> events(n);
      if (n > 0) {
        Handle mem = event_memory_type();
        h5::check_status(H5Dread(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, events.data()), "cannot read '" + h5::name_of(d) + "'");
      }
      r.events = events;
    });
  }
  if (have("steps")) {
    part("steps", [&] {
      Handle sg = open_group(g, "steps");
      auto field = [&](const char* name) -> std::vector<double> {
        if (!h5::exists(sg, name)) return {};
        return h5::read_doubles(open_dataset(sg, name));
      };
      const auto phase = field("phase"), step = field("step"), seq_len = field("seq_len"), bytes = field("cache_bytes"),
                 entries = field("cache_entries"), ms = field("ms"), token = field("token");
      // A killed writer may have appended some fields of its last step and not others.
      std::size_t n = phase.size();
      for (const auto* f : {&step, &seq_len, &bytes, &entries, &ms, &token}) n = std::min(n, f->size());
      const auto raw_bytes = h5::exists(sg, "cache_bytes") ? h5::read_int64s(open_dataset(sg, "cache_bytes")) : std::vector<int64_t>{};
      std::vector<StepStats> steps(n);
      for (std::size_t i = 0; i < n; ++i) {
        StepStats& s = steps[i];
        s.phase = static_cast<uint8_t>(phase[i]);
        s.step = static_cast<int32_t>(step[i]);
        s.seq_len = static_cast<int32_t>(seq_len[i]);
        s.cache_bytes = i < raw_bytes.size() ? static_cast<uint64_t>(raw_bytes[i]) : static_cast<uint64_t>(bytes[i]);
        s.cache_entries = static_cast<int64_t>(entries[i]);
        s.ms = ms[i];
        s.token = static_cast<int32_t>(token[i]);
      }
      r.steps = steps;
    });
  }
  if (options.kept_mask && have("kept_mask")) {
    part("kept_mask", [&] {
      Handle kg = open_group(g, "kept_mask");
      std::vector<KeptMask> masks;
      for (const auto& name : h5::list_group(kg)) {
        const int layer = index_after(name, "layer_");
        if (layer < 0) continue;
        Handle d = open_dataset(kg, name);
        const auto dims = h5::dataset_dims(d);
        if (dims.size() != 3) throw Error("'" + h5::name_of(d) + "' should have rank 3 [kv_head][position][step]");
        if (static_cast<std::size_t>(layer) >= masks.size()) masks.resize(layer + 1);
        masks[layer] = KeptMask::from_head_position_step(static_cast<int>(dims[0]), static_cast<int>(dims[1]),
                                                         static_cast<int>(dims[2]), h5::read_bytes(d));
      }
      r.kept_mask = std::move(masks);
    });
  }
  if (options.qk && have("qk")) part("qk", [&] { read_qk(open_group(g, "qk"), r); });
  if (have("router_experts") && have("router_weights")) {
    part("router", [&] {
      Handle experts = open_dataset(g, "router_experts");
      const auto dims = h5::dataset_dims(experts);
      if (dims.size() != 3 || dims[1] != static_cast<hsize_t>(r.n_layers))
        throw Error("'" + h5::name_of(experts) + "' should have shape [position][" + std::to_string(r.n_layers) +
                    "][k]");
      const std::vector<int32_t> ids = h5::read_ints(experts);
      const std::vector<float> weights = h5::read_floats(open_dataset(g, "router_weights"));
      const std::size_t width = static_cast<std::size_t>(dims[1] * dims[2]);
      if (weights.size() != ids.size()) throw Error("'router_weights' differs in shape from 'router_experts'");
      r.router_k = static_cast<int>(dims[2]);
      for (std::size_t p = 0; p < dims[0]; ++p) {
        TokenRouting token;
        token.experts.assign(ids.begin() + static_cast<std::ptrdiff_t>(p * width),
                             ids.begin() + static_cast<std::ptrdiff_t>((p + 1) * width));
        token.weights.assign(weights.begin() + static_cast<std::ptrdiff_t>(p * width),
                             weights.begin() + static_cast<std::ptrdiff_t>((p + 1) * width));
        r.routing.push_back(std::move(token));
      }
    });
  }
  if (have("nmse")) {
    part("nmse", [&] {
      Handle d = open_dataset(g, "nmse");
      const auto dims = h5::dataset_dims(d);
      const std::vector<float> v = h5::read_floats(d);
      if (dims.size() == 2)
        for (hsize_t s = 0; s < dims[0]; ++s)
          r.nmse.push_back(std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(s * dims[1]),
                                              v.begin() + static_cast<std::ptrdiff_t>((s + 1) * dims[1])));
    });
  }
}

// Attributes the reader turns into RunTrace fields rather than metadata.
bool is_structural_attr(const std::string& name) {
  static const char* names[] = {"n_layers", "n_heads",  "n_kv_heads",   "head_dim",
                                "prompt_length", "complete", "layer_windows"};
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

}  // namespace

TraceView read_trace(const std::filesystem::path& path, const ReadOptions& options) {
  Opened o = open_trace(path);
  const std::string p = path.string();
  TraceView view;
  Handle runs = open_group(o.file, "runs");
  for (const auto& name : h5::list_group(runs)) {
    if (!options.runs.empty() && std::find(options.runs.begin(), options.runs.end(), name) == options.runs.end()) continue;
    auto r = std::make_shared<RunTrace>();
    r->name = name;
    try {
      Handle g = open_group(runs, name);
      for (const auto& [key, value] : h5::all_attrs_as_text(g))
        if (!is_structural_attr(key)) r->metadata[key] = value;
      r->complete = h5::get_int_attr(g, "complete").value_or(0) == 1;
      auto need = [&](const char* attr) {
        const auto v = h5::get_int_attr(g, attr);
        if (!v) throw Error("attribute '" + std::string(attr) + "' is missing");
        return static_cast<int>(*v);
      };
      r->n_layers = need("n_layers");
      r->n_heads = need("n_heads");
      r->n_kv_heads = need("n_kv_heads");
      r->head_dim = static_cast<int>(h5::get_int_attr(g, "head_dim").value_or(0));
      r->prompt_length = need("prompt_length");
      for (int32_t w : h5::get_int_array_attr(g, "layer_windows")) r->layer_windows.push_back(w);
      if (!r->layer_windows.empty() && static_cast<int>(r->layer_windows.size()) != r->n_layers)
        throw Error("attribute 'layer_windows' holds " + std::to_string(r->layer_windows.size()) +
                    " values (expected one per layer, " + std::to_string(r->n_layers) + ")");
      std::vector<std::string> skipped;
      read_run_body(g, *r, options, [&](const std::string& what) { skipped.push_back(what); });
      if (!skipped.empty()) {
        if (r->complete)
          throw Error(skipped.front());
        for (const auto& s : skipped) view.warnings.push_back("run '" + name + "': skipped " + s);
      }
    } catch (const Error& e) {
      throw Error("trace file '" + p + "', run '" + name + "': " + e.what());
    }
    if (!r->complete)
      view.warnings.push_back("run '" + name + "' in '" + p +
                              "' is incomplete (complete = 0): the writer stopped before the run ended, so it holds " +
                              std::to_string(r->steps.size()) + " steps");
    view.runs.push_back(std::move(r));
  }
  if (!options.runs.empty())
    for (const auto& want : options.runs)
      if (!view.find(want)) throw UsageError("trace file '" + p + "' has no run named '" + want + "'");
  return view;
}

namespace {

std::string dtype_name(hid_t type) {
  const std::size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT: return size == 2 ? "float16" : size == 4 ? "float32" : size == 8 ? "float64" : "float";
    case H5T_INTEGER: return std::string(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(size * 8);
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    default: return "other";
  }
}

struct VisitState {
  std::vector<DatasetInfo>* out;
};

herr_t visit_object(hid_t loc, const char* name, const H5O_info_t* info, void* data) {
  if (info->type != H5O_TYPE_DATASET) return 0;
  auto* state = static_cast<VisitState*>(data);
  Handle d(H5Dopen2(loc, name, H5P_DEFAULT));
  if (!d.valid()) return 0;
  DatasetInfo di;
  di.path = name;
  for (hsize_t x : h5::dataset_dims(d)) di.shape.push_back(x);
  Handle t(H5Dget_type(d));
  di.dtype = dtype_name(t);
  state->out->push_back(std::move(di));
  return 0;
}

}  // namespace

TraceSummary summarize_trace(const std::filesystem::path& path) {
  Opened o = open_trace(path);
  const std::string p = path.string();
  TraceSummary summary;
  summary.attributes = o.attributes;
  Handle runs = open_group(o.file, "runs");
  for (const auto& name : h5::list_group(runs)) {
    RunSummary rs;
    rs.name = name;
    try {
      Handle g = open_group(runs, name);
      rs.attributes = h5::all_attrs_as_text(g);
      rs.complete = h5::get_int_attr(g, "complete").value_or(0) == 1;
      VisitState state{&rs.datasets};
      H5Ovisit(g, H5_INDEX_NAME, H5_ITER_INC, visit_object, &state);
      H5Eclear2(H5E_DEFAULT);
      if (h5::exists(g, "events")) {
        Handle d = open_dataset(g, "events");
        rs.n_events = static_cast<long long>(h5::dataset_dims(d).at(0));
        if (rs.n_events > 0) {
          Handle full = event_memory_type();
          std::vector<Event> events(static_cast<std::size_t>(rs.n_events));
          h5::check_status(H5Dread(d, full, H5S_ALL, H5S_ALL, H5P_DEFAULT, events.data()), "cannot read '" + h5::name_of(d) + "'");
          for (const auto& e : events) (e.action == EventAction::Merged ? rs.n_merged : rs.n_evicted)++;
        }
      }
      if (h5::exists(g, "steps/step")) rs.n_steps = static_cast<long long>(h5::dataset_dims(open_dataset(g, "steps/step")).at(0));
      if (h5::exists(g, "tokens/generated_ids"))
        rs.n_generated = static_cast<long long>(h5::dataset_dims(open_dataset(g, "tokens/generated_ids")).at(0));
    } catch (const Error& e) {
      if (rs.complete) throw Error("trace file '" + p + "', run '" + name + "': " + e.what());
      summary.warnings.push_back("run '" + name + "': " + e.what());
    }
    if (!rs.complete) summary.warnings.push_back("run '" + name + "' is incomplete (complete = 0): the writer stopped early");
    summary.runs.push_back(std::move(rs));
  }
  return summary;
}

}  // namespace kvscope::trace
