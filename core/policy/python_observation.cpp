#include "core/policy/python_observation.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include <pybind11/numpy.h>

#include "core/common/error.h"

namespace py = pybind11;

namespace kvscope::policy {

namespace {

using observation::AttentionObservation;

// Lives in the Python object; the pointers are valid until finish_python_observation.
struct Observation {
  PythonObservationContext context;
  bool valid = true;
  int width = 0;  // the layer's longest KV head, the arrays' entry axis
  py::object state;

  const AttentionObservation& obs() const {
    if (!valid) throw py::value_error("this observation belongs to a finished score() call; keep arrays, not obs");
    return *context.obs;
  }
  int kv_heads() const { return context.cache->n_kv_heads(); }
  int length(int kv_head) const { return context.cache->size(obs().layer, kv_head); }
};

// [n_kv_heads][width][head_dim] of the cache's keys or values, zero past a head's length.
py::array_t<float> cache_rows(const Observation& o, bool keys) {
  const int layer = o.obs().layer, heads = o.kv_heads(), d = o.context.cache->head_dim();
  py::array_t<float> out({heads, o.width, d});
  float* dst = out.mutable_data();
  std::fill(dst, dst + out.size(), 0.0f);
  for (int h = 0; h < heads; ++h) {
    const auto rows = keys ? o.context.cache->keys(layer, h) : o.context.cache->values(layer, h);
    std::copy(rows.begin(), rows.end(), dst + static_cast<std::size_t>(h) * o.width * d);
  }
  return out;
}

// Per query head, columns padded to the width: [n_heads][width] for a sum, [n_heads][rows][width] when the part
// holds `rows` rows (window_rows).
py::object per_query_head(const Observation& o, const std::vector<std::vector<float>>& part, const char* name,
                          std::optional<int> rows_axis = std::nullopt) {
  const auto& obs = o.obs();
  if (part.empty())
    throw py::attribute_error(std::string("obs.") + name + " was not asked for: add '" + name +
                              "' to the module's `needs`");
  const int rows = rows_axis.value_or(1);
  std::vector<py::ssize_t> shape = {obs.n_heads, o.width};
  if (rows_axis) shape = {obs.n_heads, rows, o.width};
  py::array_t<float> out(shape);
  float* dst = out.mutable_data();
  std::fill(dst, dst + out.size(), 0.0f);
  for (int q = 0; q < obs.n_heads; ++q) {
    const int cols = obs.keys_of(q);
    for (int r = 0; r < rows; ++r)
      std::memcpy(dst + (static_cast<std::size_t>(q) * rows + r) * o.width,
                  part[q].data() + static_cast<std::size_t>(r) * cols, sizeof(float) * cols);
  }
  return out;
}

// One of the step's per-query parts: [n_queries][heads][head_dim], or [n_queries][width] without heads.
py::array_t<float> step_rows(const Observation& o, const std::vector<float>& part, const char* name,
                             std::optional<int> heads) {
  const auto& obs = o.obs();
  if (part.empty())
    throw py::attribute_error(std::string("obs.") + name + " was not asked for: add '" + name +
                              "' to the module's `needs`");
  const int n = std::max(1, obs.n_queries());
  const int per_query = static_cast<int>(part.size() / n);
  if (!heads) return py::array_t<float>({n, per_query}, part.data());
  return py::array_t<float>({n, *heads, per_query / *heads}, part.data());
}

py::object weight(const Observation& o, const py::object& w, const char* name) {
  o.obs();
  if (!w || w.is_none())
    throw py::attribute_error(std::string("obs.") + name + " was not asked for: add '" + name +
                              "' to the module's `needs`");
  return w;
}

py::array_t<int32_t> positions(const Observation& o) {
  const int layer = o.obs().layer, heads = o.kv_heads();
  py::array_t<int32_t> out({heads, o.width});
  int32_t* dst = out.mutable_data();
  std::fill(dst, dst + out.size(), -1);
  for (int h = 0; h < heads; ++h) {
    const auto p = o.context.cache->positions(layer, h);
    std::copy(p.begin(), p.end(), dst + static_cast<std::size_t>(h) * o.width);
  }
  return out;
}

py::object state(Observation& o) {
  if (!o.state) {
    const int layer = o.obs().layer, heads = o.kv_heads();
    py::array_t<float> out({heads, o.width});
    float* dst = out.mutable_data();
    std::fill(dst, dst + out.size(), 0.0f);
    for (int h = 0; h < heads; ++h) {
      const auto s = o.context.cache->scores(layer, h);
      std::copy(s.begin(), s.end(), dst + static_cast<std::size_t>(h) * o.width);
    }
    o.state = std::move(out);
  }
  return o.state;
}

void register_class(py::module_& scope) {
  py::class_<Observation>(scope, "Observation")
      .def_property_readonly("layer", [](const Observation& o) { return o.obs().layer; })
      .def_property_readonly(
          "phase",
          [](const Observation& o) { return o.obs().phase == observation::Phase::Prefill ? "prefill" : "decode"; })
      .def_property_readonly("step", [](const Observation& o) { return o.obs().step; })
      .def_property_readonly("n_heads", [](const Observation& o) { return o.obs().n_heads; })
      .def_property_readonly("n_kv_heads", [](const Observation& o) { return o.obs().n_kv_heads; })
      .def_property_readonly("head_dim", [](const Observation& o) { return o.context.cache->head_dim(); })
      .def_property_readonly("n_entries", [](const Observation& o) { return o.width; })
      .def_property_readonly("lengths",
                             [](const Observation& o) {
                               py::array_t<int32_t> out(o.kv_heads());
                               for (int h = 0; h < o.kv_heads(); ++h) out.mutable_at(h) = o.length(h);
                               return out;
                             })
      .def_property_readonly("budget", [](const Observation& o) { return (o.obs(), o.context.budget); })
      .def_property_readonly("prompt_length", [](const Observation& o) { return (o.obs(), o.context.prompt_length); })
      .def_property_readonly("params", [](const Observation& o) { return (o.obs(), o.context.params); })
      .def_property_readonly("rope", [](const Observation& o) { return (o.obs(), o.context.rope); })
      .def_property_readonly("q_proj", [](const Observation& o) { return weight(o, o.context.q_proj, "q_proj"); })
      .def_property_readonly("k_proj", [](const Observation& o) { return weight(o, o.context.k_proj, "k_proj"); })
      .def_property_readonly("window", [](const Observation& o) { return o.obs().window; })
      .def_property_readonly("keys", [](const Observation& o) { return cache_rows(o, true); })
      .def_property_readonly("values", [](const Observation& o) { return cache_rows(o, false); })
      .def_property_readonly("positions", &positions)
      // `obs.state += x` reads, adds in place and assigns back: the setter takes the array (checked at the end).
      .def_property("state", &state, [](Observation& o, py::object value) { (o.obs(), o.state = std::move(value)); })
      .def_property_readonly("query_positions",
                             [](const Observation& o) {
                               const auto& q = o.obs().query_positions;
                               return py::array_t<int32_t>(static_cast<py::ssize_t>(q.size()), q.data());
                             })
      .def_property_readonly("column_sums",
                             [](const Observation& o) { return per_query_head(o, o.obs().column_sums, "column_sums"); })
      .def_property_readonly("window_sums",
                             [](const Observation& o) { return per_query_head(o, o.obs().window_sums, "window_sums"); })
      .def_property_readonly(
          "window_rows",
          [](const Observation& o) { return per_query_head(o, o.obs().window_rows, "window_rows", o.obs().window); })
      .def_property_readonly("last_row",
                             [](const Observation& o) { return per_query_head(o, o.obs().last_row, "last_row"); })
      .def_property_readonly("log_sum_exp",
                             [](const Observation& o) {
                               const auto& obs = o.obs();
                               if (obs.log_sum_exp.empty())
                                 throw py::attribute_error("obs.log_sum_exp was not asked for: add 'log_sum_exp' to `needs`");
                               py::array_t<float> out({obs.n_heads, obs.n_queries()});
                               for (int q = 0; q < obs.n_heads; ++q)
                                 std::copy(obs.log_sum_exp[q].begin(), obs.log_sum_exp[q].end(),
                                           out.mutable_data() + static_cast<std::size_t>(q) * obs.n_queries());
                               return out;
                             })
      .def_property_readonly("queries_pre_rope",
                             [](const Observation& o) {
                               return step_rows(o, o.obs().queries_pre_rope, "queries_pre_rope", o.obs().n_heads);
                             })
      .def_property_readonly(
          "keys_pre_rope",
          [](const Observation& o) { return step_rows(o, o.obs().keys_pre_rope, "keys_pre_rope", o.obs().n_kv_heads); })
      .def_property_readonly(
          "hidden_states",
          [](const Observation& o) { return step_rows(o, o.obs().hidden_states, "hidden_states", std::nullopt); })
      .def_property_readonly("queries", [](const Observation& o) {
        const auto& obs = o.obs();
        if (obs.queries.empty())
          throw py::attribute_error("obs.queries was not asked for: add 'queries' to the module's `needs`");
        const int d = static_cast<int>(obs.queries.size() / std::max(1, obs.n_queries() * obs.n_heads));
        return py::array_t<float>({obs.n_queries(), obs.n_heads, d}, obs.queries.data());
      });
}

py::object observation_class() {
  static py::object* cls = nullptr;  // under the GIL; never freed (the interpreter outlives every run)
  if (!cls) {
    py::module_ scope = py::module_::import("types").attr("ModuleType")("kvscope_policy_api").cast<py::module_>();
    register_class(scope);
    cls = new py::object(scope.attr("Observation"));
  }
  return *cls;
}

}  // namespace

py::object make_python_observation(const PythonObservationContext& context) {
  observation_class();  // registers the type on first use
  auto o = std::make_unique<Observation>();
  o->context = context;
  for (int h = 0; h < context.cache->n_kv_heads(); ++h)
    o->width = std::max(o->width, context.cache->size(context.obs->layer, h));
  return py::cast(std::move(o));
}

void finish_python_observation(py::object& object) {
  auto& o = object.cast<Observation&>();
  if (o.state && o.valid) {
    const auto array = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(o.state);
    const int layer = o.context.obs->layer, heads = o.kv_heads();
    if (!array || array.ndim() != 2 || array.shape(0) != heads || array.shape(1) != o.width)
      throw Error("obs.state was replaced by an array of another shape; update it in place (obs.state[...] = ...)");
    for (int h = 0; h < heads; ++h) {
      auto dst = o.context.cache->mutable_scores(layer, h);
      std::copy_n(array.data() + static_cast<std::size_t>(h) * o.width, dst.size(), dst.begin());
    }
  }
  o.valid = false;
}

}  // namespace kvscope::policy
