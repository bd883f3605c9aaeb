#include "core/policy/python_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "core/common/error.h"
#include "core/common/file_text.h"
#include "core/common/sha256.h"
#include "core/policy/allocation.h"
#include "core/policy/python_observation.h"
#include "core/policy/python_rope.h"
#include "core/policy/selection.h"
#include "core/policy/user_code_scope.h"
#include "core/policy/user_scorer.h"
#include "core/python/interpreter.h"
#include "kernels/common/dequantize.h"

namespace py = pybind11;

namespace kvscope::policy {

namespace {

// What the engine's threads hold of a loaded file; the Python objects are released under the GIL.
struct Module {
  std::filesystem::path file;
  py::object module, score, allocate, merge, recent, sinks;
  int score_line = 0;
  ~Module() {
    if (!module) return;
    python::Gil gil;
    module = score = allocate = merge = recent = sinks = py::object();
  }
  // "policy file 'x.py', line 7 (in score): ValueError: ..."; GIL held.
  std::string describe(py::error_already_set& e) const {
    const auto report = python::describe(e, file);
    std::string where = "policy file '" + file.string() + "'";
    if (report.line) where += ", line " + std::to_string(*report.line);
    if (!report.function.empty() && report.function != "<module>") where += " (in " + report.function + ")";
    return where + ": " + report.text;
  }
  std::string function_label(const char* name) const {
    return "policy file '" + file.string() + "', " + name + "()" +
           (score_line > 0 && std::string(name) == "score" ? " (line " + std::to_string(score_line) + ")" : "");
  }
  // Calls into the file's code (GIL held) marked as user code (core/policy/user_code_scope.h). An os._exit
  // the code attempted fails the call even when the code caught the refusal.
  template <class Call>
  auto run(const char* name, int layer, Call&& call) const {
    python::take_exit_attempt();  // a refusal that already failed an earlier call
    const bool module_code = std::string(name) == "<module>";
    const std::string callback = module_code ? "its module code" : std::string(name) + "()";
    UserCodeScope running("policy file", file, callback.c_str(), layer);
    auto result = call();
    if (const auto attempt = python::take_exit_attempt())
      throw Error((module_code ? "policy file '" + file.string() + "', " + callback : function_label(name)) +
                  " called " + *attempt +
                  " and went on past its refusal; a policy may not end kvscope's process (raise an exception to "
                  "fail the run)");
    return result;
  }
};

// A weight matrix dequantized to float32 (rows, cols), read-only: the file's rows in the file's order.
py::array_t<float> dequantized(const kernels::QuantMatrix& m) {
  py::array_t<float> out({m.rows, m.cols});
  float* dst = out.mutable_data();
  for (int r = 0; r < m.rows; ++r)
    kernels::dequantize_row(m.type, m.row(r), dst + static_cast<std::size_t>(r) * m.cols, m.cols);
  out.attr("setflags")(py::arg("write") = false);
  return out;
}

// A value of the file, as it reads in Python (shortened), for messages.
std::string python_repr(const py::handle& value) {
  std::string text = py::repr(value).cast<std::string>();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

// A number of the file's declarations as a double, or a UsageError naming `where`.
double number_field(const py::handle& value, const std::string& where) {
  if (py::isinstance<py::bool_>(value) || (!py::isinstance<py::int_>(value) && !py::isinstance<py::float_>(value)))
    throw UsageError(where + " must be a number, not " + python_repr(value));
  try {
    return value.cast<double>();
  } catch (const py::cast_error&) {
    throw UsageError(where + " = " + python_repr(value) + " is too large for a float64");
  }
}

// An int of the file's declarations (kvscope's parameters are C ints), or a UsageError naming `where`.
int int_field(const py::handle& value, const std::string& where) {
  if (py::isinstance<py::bool_>(value) || !py::isinstance<py::int_>(value))
    throw UsageError(where + " must be an int, not " + python_repr(value));
  long long v = std::numeric_limits<long long>::max();
  try {
    v = value.cast<long long>();
  } catch (const py::cast_error&) {
  }
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    throw UsageError(where + " = " + python_repr(value) + " does not fit a 32-bit int");
  return static_cast<int>(v);
}

py::object optional_callable(const py::module_& m, const char* name, const std::filesystem::path& file) {
  if (!py::hasattr(m, name)) return py::object();
  py::object f = m.attr(name);
  if (!PyCallable_Check(f.ptr()))
    throw UsageError("policy file '" + file.string() + "': `" + name + "` must be a function");
  return f;
}

// One entry of the module's `params`: a default (int, float or bool), a tuple (default, min, max[, doc]) or a
// dict with default, min, max, choices and doc.
ParamSpec param_from_python(const std::string& name, const py::handle& value, const std::filesystem::path& file) {
  const std::string where = "policy file '" + file.string() + "', params['" + name + "']";
  py::object def = py::reinterpret_borrow<py::object>(value);
  py::object lo = py::none(), hi = py::none(), choices = py::none();
  std::string doc;
  if (py::isinstance<py::dict>(value)) {
    py::dict d = py::reinterpret_borrow<py::dict>(value);
    for (auto item : d) {
      const auto key = py::str(item.first).cast<std::string>();
      if (key != "default" && key != "min" && key != "max" && key != "choices" && key != "doc")
        throw UsageError(where + " has key '" + key + "'; valid: default, min, max, choices, doc");
    }
    if (!d.contains("default")) throw UsageError(where + " has no 'default'");
    def = d["default"];
    if (d.contains("min")) lo = d["min"];
    if (d.contains("max")) hi = d["max"];
    if (d.contains("choices")) choices = d["choices"];
    if (d.contains("doc")) doc = py::str(d["doc"]).cast<std::string>();
  } else if (py::isinstance<py::tuple>(value)) {
    py::tuple t = py::reinterpret_borrow<py::tuple>(value);
    if (t.size() < 3 || t.size() > 4) throw UsageError(where + ": a tuple is (default, min, max[, doc])");
    def = t[0], lo = t[1], hi = t[2];
    if (t.size() == 4) doc = py::str(t[3]).cast<std::string>();
  }
  if (doc.empty()) doc = "declared by " + file.filename().string();
  if (!choices.is_none()) {
    if (!py::isinstance<py::list>(choices) && !py::isinstance<py::tuple>(choices))
      throw UsageError(where + "['choices'] must be a list, not " + python_repr(choices));
    std::vector<std::string> options;
    for (auto c : choices) options.push_back(py::str(c).cast<std::string>());
    const std::string d = py::str(def).cast<std::string>();
    if (std::find(options.begin(), options.end(), d) == options.end())
      throw UsageError(where + ": default '" + d + "' is not one of its choices");
    return ParamSpec::choice(name, d, options, doc);
  }
  if (py::isinstance<py::bool_>(def)) return ParamSpec::flag(name, def.cast<bool>(), doc);
  if (py::isinstance<py::int_>(def)) {
    constexpr int kWide = 1 << 30;
    return ParamSpec::integer(name, int_field(def, where + " default"),
                              lo.is_none() ? -kWide : int_field(lo, where + " min"),
                              hi.is_none() ? kWide : int_field(hi, where + " max"), doc);
  }
  if (py::isinstance<py::float_>(def))
    return ParamSpec::real(name, number_field(def, where + " default"),
                           lo.is_none() ? -1e300 : number_field(lo, where + " min"),
                           hi.is_none() ? 1e300 : number_field(hi, where + " max"), doc);
  throw UsageError(where + ": the default must be an int, float or bool (or give choices)");
}

Protocol protocol_from_python(const py::module_& m, const std::filesystem::path& file) {
  Protocol p{.block = 0, .decode_evict = false, .trim_before_output = false};
  if (!py::hasattr(m, "protocol")) return p;
  const std::string where = "policy file '" + file.string() + "', protocol";
  py::object o = m.attr("protocol");
  if (!py::isinstance<py::dict>(o))
    throw UsageError(where + " must be a dict (block, decode_evict, trim, decode_interval, prefill_evict, block_scoring, "
                     "decode_buffer)");
  for (auto item : o.cast<py::dict>()) {
    const auto key = py::str(item.first).cast<std::string>();
    if (key == "block") {
      p.block = int_field(item.second, where + "['block']");
    } else if (key == "decode_evict") {
      if (!py::isinstance<py::bool_>(item.second))
        throw UsageError(where + "['decode_evict'] must be True or False, not " + python_repr(item.second));
      p.decode_evict = item.second.cast<bool>();
    } else if (key == "trim") {
      const auto t = py::str(item.second).cast<std::string>();
      if (t != "before_output" && t != "after_output") throw UsageError(where + "['trim'] must be before_output or after_output");
      p.trim_before_output = t == "before_output";
    } else if (key == "decode_interval") {
      p.decode_interval = int_field(item.second, where + "['decode_interval']");
      if (p.decode_interval < 1)
        throw UsageError(where + "['decode_interval'] = " + std::to_string(p.decode_interval) +
                         ": it counts decode steps between evictions, at least 1");
    } else if (key == "prefill_evict") {
      if (!py::isinstance<py::bool_>(item.second))
        throw UsageError(where + "['prefill_evict'] must be True or False, not " + python_repr(item.second));
      p.prefill_evict = item.second.cast<bool>();
    } else if (key == "block_scoring") {
      p.block_scoring = int_field(item.second, where + "['block_scoring']");
      if (p.block_scoring < 0)
        throw UsageError(where + "['block_scoring'] = " + std::to_string(p.block_scoring) +
                         ": it is BlockPress's block size, at least 1 (0: every entry scored at once)");
    } else if (key == "decode_buffer") {
      p.decode_buffer = int_field(item.second, where + "['decode_buffer']");
      if (p.decode_buffer < 0)
        throw UsageError(where + "['decode_buffer'] = " + std::to_string(p.decode_buffer) +
                         ": it counts earlier decode steps an evicting step is scored on, at least 0");
    } else {
      throw UsageError(where + " has key '" + key +
                       "'; valid: block, decode_evict, trim, decode_interval, prefill_evict, block_scoring, "
                       "decode_buffer");
    }
  }
  if (const std::string problem = protocol_problem(p); !problem.empty())
    throw UsageError(where + ": " + problem);
  return p;
}

py::dict typed_params(const std::vector<ParamSpec>& specs, const PolicyParams& values) {
  py::dict out;
  for (const auto& s : specs) {
    switch (s.kind) {
      case ParamSpec::Kind::Int: out[py::str(s.name)] = values.get_int(s.name); break;
      case ParamSpec::Kind::Float: out[py::str(s.name)] = values.get_float(s.name); break;
      case ParamSpec::Kind::Bool: out[py::str(s.name)] = values.get_bool(s.name); break;
      case ParamSpec::Kind::Choice: out[py::str(s.name)] = values.get_choice(s.name); break;
      case ParamSpec::Kind::RealList: {
        py::list list;
        for (double v : values.get_list(s.name)) list.append(v);
        out[py::str(s.name)] = list;
        break;
      }
    }
  }
  return out;
}

// allocate(info) -> one budget per layer (Policy-level budgets; docs/policies.md, "Writing a policy").
class PythonAllocation final : public LayerAllocation {
 public:
  PythonAllocation(std::shared_ptr<Module> module, py::object params) : module_(std::move(module)), params_(std::move(params)) {}
  ~PythonAllocation() override {
    python::Gil gil;
    params_ = py::object();
  }
  std::string name() const override { return "allocate() of " + module_->file.filename().string(); }
  observation::ObservationRequest request(int) const override { return {}; }
  void observe(const observation::AttentionObservation&) override {}
  std::vector<int> budgets(int n_layers, int average_budget, int seq_len) override {
    python::Gil gil;
    std::vector<int> out;
    try {
      py::object info = py::module_::import("types").attr("SimpleNamespace")(
          py::arg("n_layers") = n_layers, py::arg("budget") = average_budget, py::arg("prompt_length") = seq_len,
          py::arg("reserved") = reserved_, py::arg("params") = params_);
      out = module_->run("allocate", -1, [&] { return module_->allocate(info); }).cast<std::vector<int>>();
    } catch (py::error_already_set& e) {
      throw Error(module_->describe(e));
    } catch (const py::cast_error&) {
      throw Error(module_->function_label("allocate") + " must return a list of " + std::to_string(n_layers) + " ints");
    }
    if (static_cast<int>(out.size()) != n_layers)
      throw Error(module_->function_label("allocate") + " returned " + std::to_string(out.size()) + " budgets for " +
                  std::to_string(n_layers) + " layers");
    long total = 0;
    for (int& b : out) {
      if (b < 1) throw Error(module_->function_label("allocate") + " returned a budget below 1");
      b = std::min(b, seq_len);
      total += b;
    }
    // Comparisons stay fair: the layers together keep no more than the uniform split would.
    if (total > static_cast<long>(n_layers) * average_budget)
      throw Error(module_->function_label("allocate") + " returned budgets summing to " + std::to_string(total) +
                  ", more than n_layers x budget = " + std::to_string(static_cast<long>(n_layers) * average_budget));
    return out;
  }

 private:
  std::shared_ptr<Module> module_;
  py::object params_;
};

class PythonPolicy final : public UserScorer {
 public:
  PythonPolicy(std::string name, const PolicyParams& params, ObservationRequest needs, std::shared_ptr<Module> module,
               std::vector<ParamSpec> specs, bool wants_q_proj, bool wants_k_proj)
      : UserScorer(std::move(name), params, needs, module->file),
        module_(std::move(module)),
        specs_(std::move(specs)),
        wants_q_proj_(wants_q_proj),
        wants_k_proj_(wants_k_proj) {
    python::Gil gil;
    params_dict_ = typed_params(specs_, this->params());
  }
  ~PythonPolicy() override {
    python::Gil gil;
    params_dict_ = py::object();
    rope_ = py::object();
    projections_.clear();
  }

 protected:
  std::string what() const override { return "policy file '" + file().string() + "'"; }

  void on_begin(const RunInfo& info) override {
    protect_memo_.clear();
    {
      python::Gil gil;
      rope_ = make_python_rope(info.config);
      projections_.clear();  // another run may bring another model
    }
    precise_.assign(info.config.n_layers, std::vector<std::vector<double>>(info.config.n_kv_heads));
  }

  // The file's float64 scores rank, not their float32 copies (which the trace records): scores 1e-12 apart
  // are kept by value, not by position.
  std::vector<double> rank_scores(int layer, int kv_head, std::span<const float> scores) override {
    std::vector<double> precise = std::move(precise_.at(layer).at(kv_head));
    precise_[layer][kv_head].clear();
    // Only this step's scores of this head: the float32 copies the edit carries must be theirs.
    const bool current =
        precise.size() == scores.size() && std::equal(precise.begin(), precise.end(), scores.begin(),
                                                      [](double d, float f) { return static_cast<float>(d) == f; });
    if (!current) return UserScorer::rank_scores(layer, kv_head, scores);
    return precise;
  }

  std::unique_ptr<LayerAllocation> make_layer_allocation() const override {
    if (!module_->allocate) return ScoredPolicy::make_layer_allocation();
    python::Gil gil;
    return std::make_unique<PythonAllocation>(module_, params_dict_);
  }

  // Python sees a whole layer at once: the call for KV head 0 scores every head.
  std::vector<float> score(const AttentionObservation& obs, int kv_head, cache::KVCache& cache) override {
    if (kv_head == 0) score_layer(obs, cache);
    return std::move(layer_scores_.at(kv_head));
  }

  int sinks(int budget) const override {
    return module_->sinks ? protect(module_->sinks, "sinks", budget) : UserScorer::sinks(budget);
  }
  int recent(int budget) const override {
    return module_->recent ? std::max(protect(module_->recent, "recent", budget), reserved()) : UserScorer::recent(budget);
  }

  void complete_edit(cache::HeadEdit& edit, const cache::KVCache& cache) override {
    if (!module_->merge) return;
    python::Gil gil;
    const int n = cache.size(edit.layer, edit.kv_head), d = cache.head_dim();
    try {
      auto rows = [&](std::span<const float> r) { return py::array_t<float>({n, d}, r.data()); };
      const auto pos = cache.positions(edit.layer, edit.kv_head);
      py::object ctx = py::module_::import("types").attr("SimpleNamespace")(
          py::arg("layer") = edit.layer, py::arg("kv_head") = edit.kv_head,
          py::arg("keys") = rows(cache.keys(edit.layer, edit.kv_head)),
          py::arg("values") = rows(cache.values(edit.layer, edit.kv_head)),
          py::arg("positions") = py::array_t<int32_t>(n, pos.data()),
          py::arg("scores") = py::array_t<float>(static_cast<py::ssize_t>(edit.scores.size()), edit.scores.data()),
          py::arg("kept") = py::array_t<int32_t>(static_cast<py::ssize_t>(edit.keep.size()), edit.keep.data()),
          py::arg("params") = params_dict_);
      py::object groups = module_->run("merge", edit.layer, [&] { return module_->merge(ctx); });
      if (groups.is_none()) return;
      for (auto g : groups) {
        py::tuple t = py::reinterpret_borrow<py::object>(g).cast<py::tuple>();
        if (t.size() != 3) throw py::cast_error();
        cache::MergeGroup m;
        m.target = t[0].cast<int32_t>();
        m.sources = t[1].cast<std::vector<int32_t>>();
        m.weights = t[2].cast<std::vector<float>>();
        edit.merges.push_back(std::move(m));
      }
    } catch (py::error_already_set& e) {
      throw Error(module_->describe(e));
    } catch (const py::cast_error&) {
      throw Error(module_->function_label("merge") +
                  " must return None or a list of (target, [sources], [weights]) with 1 + len(sources) weights");
    }
    try {
      cache::KVCache::validate(edit, n, cache.n_layers(), cache.n_kv_heads());
    } catch (const Error& e) {
      throw Error(module_->function_label("merge") + " returned an invalid merge for layer " + std::to_string(edit.layer) +
                  " KV head " + std::to_string(edit.kv_head) + ": " + e.what());
    }
  }

 private:
  void score_layer(const AttentionObservation& obs, cache::KVCache& cache) {
    const int heads = cache.n_kv_heads();
    layer_scores_.assign(heads, {});
    python::Gil gil;
    PythonObservationContext context{&obs,         &cache, layer_budgets().at(obs.layer), run_info().prompt_length,
                                     params_dict_, rope_,  projection(obs.layer, 'q'),    projection(obs.layer, 'k')};
    py::object view = make_python_observation(context);
    py::object result;
    try {
      result = module_->run("score", obs.layer, [&] { return module_->score(view); });
      finish_python_observation(view);
    } catch (py::error_already_set& e) {
      const std::string message = module_->describe(e);
      finish_python_observation(view);
      throw Error(message);
    }
    int width = 0;
    for (int h = 0; h < heads; ++h) width = std::max(width, cache.size(obs.layer, h));
    const std::string where = module_->function_label("score") + " for layer " + std::to_string(obs.layer);
    py::array_t<double, py::array::c_style | py::array::forcecast> scores;
    try {
      scores = py::array_t<double, py::array::c_style | py::array::forcecast>::ensure(result);
    } catch (py::error_already_set&) {
    }
    if (result.is_none())
      throw Error(where + " returned None; it must return an array of shape (n_kv_heads, n_entries) = (" +
                  std::to_string(heads) + ", " + std::to_string(width) + ") (a missing `return`?)");
    if (!scores) throw Error(where + " returned " + py::str(result.get_type()).cast<std::string>() + ", not an array of numbers");
    if (scores.ndim() != 2 || scores.shape(0) != heads || scores.shape(1) != width) {
      std::string shape;
      for (py::ssize_t i = 0; i < scores.ndim(); ++i) shape += (i ? ", " : "") + std::to_string(scores.shape(i));
      throw Error(where + " returned shape (" + shape + "); expected (n_kv_heads, n_entries) = (" + std::to_string(heads) +
                  ", " + std::to_string(width) + ")");
    }
    for (int h = 0; h < heads; ++h) {
      const double* precise = scores.data() + static_cast<std::size_t>(h) * width;
      const int n = cache.size(obs.layer, h);
      std::vector<float> row(precise, precise + n);  // what the edit carries and the trace records
      if (const std::string bad = non_finite_scores(row.data(), n); !bad.empty())
        throw Error(where + " KV head " + std::to_string(h) + ": " + bad + float32_overflow(precise, row.data(), n) +
                    "; scores must be finite");
      layer_scores_[h] = std::move(row);
      precise_.at(obs.layer).at(h).assign(precise, precise + n);
    }
  }

  // Why a score is infinite when the file's own value was finite: it overflowed float32, the type scores are
  // recorded in.
  static std::string float32_overflow(const double* given, const float* row, int n) {
    int first = 0;
    while (first < n && std::isfinite(row[first])) ++first;
    if (first == n || std::isnan(row[first])) return "";
    const double value = given[first];
    if (!std::isfinite(value)) return "";
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", value);
    return " (the score returned there is " + std::string(text) +
           ", finite as a float64 but beyond float32's largest, 3.4028235e+38: scores are recorded as float32 and "
           "it overflows to " +
           (value > 0 ? "inf" : "-inf") + ")";
  }

  // The layer's q_proj or k_proj weight when the file needs it (dequantized once per run), else None; GIL held.
  py::object projection(int layer, char which) {
    if (!(which == 'q' ? wants_q_proj_ : wants_k_proj_)) return py::none();
    const kernels::ModelWeights* weights = run_info().weights;
    if (!weights || layer < 0 || layer >= static_cast<int>(weights->layers.size()))
      throw Error(what() + " needs " + which + "_proj, but this run has no model weights to give");
    py::object& cached = projections_[{layer, which}];
    if (!cached) {
      const auto& lw = weights->layers[layer];
      cached = dequantized(which == 'q' ? lw.wq : lw.wk);
    }
    return cached;
  }

  int protect(const py::object& f, const char* name, int budget) const {
    const auto key = std::make_pair(std::string(name), budget);
    if (const auto it = protect_memo_.find(key); it != protect_memo_.end()) return it->second;
    python::Gil gil;
    int value = 0;
    try {
      value = module_->run(name, -1, [&] { return f(budget, params_dict_); }).cast<int>();
    } catch (py::error_already_set& e) {
      throw Error(module_->describe(e));
    } catch (const py::cast_error&) {
      throw Error(module_->function_label(name) + " must return an int");
    }
    if (value < 0) throw Error(module_->function_label(name) + " returned " + std::to_string(value) + ", below 0");
    return protect_memo_[key] = value;
  }

  std::shared_ptr<Module> module_;
  std::vector<ParamSpec> specs_;
  py::object params_dict_;  // a dict, built under the GIL (a default py::dict would call Python without it)
  py::object rope_;         // obs.rope of this run's model
  bool wants_q_proj_, wants_k_proj_;
  std::map<std::pair<int, char>, py::object> projections_;  // (layer, 'q' or 'k') -> read-only float32 array
  std::vector<std::vector<float>> layer_scores_;
  std::vector<std::vector<std::vector<double>>> precise_;  // [layer][kv_head]: this step's float64 scores
  mutable std::map<std::pair<std::string, int>, int> protect_memo_;
};

}  // namespace

PolicyInfo load_python_policy(const std::filesystem::path& file) {
  const auto text = read_file_text(file);
  if (!text) throw UsageError("policy file '" + file.string() + "' cannot be read");
  const std::string& source = *text;
  auto module = std::make_shared<Module>();
  module->file = file;
  PolicyInfo info;
  info.name = "python:" + file.stem().string();
  info.provenance = {{"policy_file", std::filesystem::absolute(file).string()},
                     {"policy_file_kind", "python"},
                     {"policy_file_sha256", sha256_hex(source)}};
  std::vector<ParamSpec> own;
  std::map<std::string, int> framework_defaults;
  std::vector<std::string> needs;
  Protocol protocol;
  {
    python::Gil gil;
    py::module_ m;
    try {
      m = module->run("<module>", -1, [&] { return python::load_module(file, source); });
    } catch (py::error_already_set& e) {
      throw UsageError(module->describe(e));
    }
    module->module = m;
    module->score = optional_callable(m, "score", file);
    if (!module->score)
      throw UsageError("policy file '" + file.string() + "' defines no score(obs) function (it must return a "
                       "(n_kv_heads, n_entries) array of scores, higher kept)");
    // A plain function has its line; a callable object or a builtin does not, and messages then name none.
    const py::object code = py::getattr(module->score, "__code__", py::none());
    if (!code.is_none()) module->score_line = code.attr("co_firstlineno").cast<int>();
    module->allocate = optional_callable(m, "allocate", file);
    module->merge = optional_callable(m, "merge", file);
    module->recent = optional_callable(m, "recent", file);
    module->sinks = optional_callable(m, "sinks", file);
    try {
      if (py::hasattr(m, "needs")) {
        py::object declared = m.attr("needs");
        if (py::isinstance<py::str>(declared))  // needs = "column_sums": one name, not its letters
          needs.push_back(declared.cast<std::string>());
        else if (!py::isinstance<py::list>(declared) && !py::isinstance<py::tuple>(declared))
          throw UsageError("policy file '" + file.string() + "': needs must be a list of names, not " +
                           python_repr(declared));
        else
          for (auto n : declared) needs.push_back(py::str(n).cast<std::string>());
      }
      if (py::hasattr(m, "params")) {
        py::object p = m.attr("params");
        if (!py::isinstance<py::dict>(p)) throw UsageError("policy file '" + file.string() + "': params must be a dict");
        for (auto item : p.cast<py::dict>()) {
          const auto name = py::str(item.first).cast<std::string>();
          ParamSpec spec = param_from_python(name, item.second, file);
          if (is_framework_param(name)) {
            if (spec.kind != ParamSpec::Kind::Int)
              throw UsageError("policy file '" + file.string() + "', params['" + name + "'] must be an int");
            framework_defaults[name] = static_cast<int>(spec.default_number);
          } else {
            own.push_back(std::move(spec));
          }
        }
      }
      if (py::hasattr(m, "summary")) info.summary = py::str(m.attr("summary")).cast<std::string>();
      else if (!m.doc().is_none()) info.summary = py::str(m.doc()).cast<std::string>();
      protocol = protocol_from_python(m, file);
    } catch (py::error_already_set& e) {
      throw UsageError(module->describe(e));
    } catch (const py::cast_error& e) {
      throw UsageError("policy file '" + file.string() + "': a value of its needs, params, summary or protocol has the "
                       "wrong type (" + e.what() + ")");
    }
  }
  std::vector<std::string> declared;
  for (const auto& s : own) declared.push_back(s.name);
  for (auto& s : scorer_framework_params(framework_defaults)) own.push_back(std::move(s));
  for (const auto& s : own)
    for (const auto& reserved : protocol_params(protocol))
      if (s.name == reserved.name || s.name == "allocation" || is_selection_param(s.name))
        throw UsageError("policy file '" + file.string() + "' declares parameter '" + s.name +
                         "', which the framework owns (set protocol defaults in `protocol`)");
  const ObservationRequest request = request_for_needs(needs, file);
  const bool wants_q_proj = std::find(needs.begin(), needs.end(), "q_proj") != needs.end();
  const bool wants_k_proj = std::find(needs.begin(), needs.end(), "k_proj") != needs.end();
  const std::vector<ParamSpec> all = scored_policy_params(own, protocol);
  for (const auto& s : all)
    if (const std::string problem = default_range_problem(s); !problem.empty())
      throw UsageError("policy file '" + file.string() + "', parameter '" + s.name + "': " + problem);
  info.params = all;
  if (module->allocate) {
    // A file that allocates budgets itself takes no allocation parameters; they keep their defaults.
    info.params = own;
    for (auto& s : protocol_params(protocol)) info.params.push_back(std::move(s));
  }
  if (info.summary.empty()) info.summary = "a Python scorer (" + file.filename().string() + ")";
  info.reference = std::filesystem::absolute(file).string();
  if (!module->allocate)
    info.resolve_params = [declared, framework_defaults, what = "policy file '" + file.string() + "'"](
                              PolicyParams& p) { resolve_allocation_params(what, declared, framework_defaults, p); };
  info.make = [module, request, all, wants_q_proj, wants_k_proj,
               name = info.name](const PolicyParams& given) -> std::unique_ptr<Policy> {
    // obs.params: what applies, as the spec made it (another allocation's parameters are gone already).
    std::vector<ParamSpec> visible;
    for (const auto& s : all)
      if (given.has(s.name)) visible.push_back(s);
    PolicyParams p = given;
    if (module->allocate) p.set_choice("allocation", "uniform");  // allocate() decides; uniform reads no parameter
    return std::make_unique<PythonPolicy>(name, p, request, module, visible, wants_q_proj, wants_k_proj);
  };
  return info;
}

}  // namespace kvscope::policy
