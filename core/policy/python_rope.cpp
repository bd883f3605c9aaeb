#include "core/policy/python_rope.h"

#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include <pybind11/numpy.h>

#include "core/policy/rope_rotation.h"

namespace py = pybind11;

namespace kvscope::policy {

namespace {

struct Rope : RopeRotation {
  using RopeRotation::RopeRotation;

  // x (..., head_dim) rotated to `positions` (broadcast to x's leading axes), or back from them: the engine's
  // rotation by -position, which its cosf/sinf make the transposed matrix.
  py::array_t<float> rotate(const py::object& x, const py::object& positions, bool inverse) {
    auto np = py::module_::import("numpy");
    py::array_t<float, py::array::c_style | py::array::forcecast> in = np.attr("asarray")(x, "float32");
    if (in.ndim() < 1 || in.shape(in.ndim() - 1) != head_dim)
      throw py::value_error("rope.rotate: x must have shape (..., head_dim) = (..., " + std::to_string(head_dim) +
                            "), not " + py::str(py::tuple(np.attr("shape")(in))).cast<std::string>());
    py::tuple lead(in.ndim() - 1);
    for (py::ssize_t i = 0; i + 1 < in.ndim(); ++i) lead[i] = in.shape(i);
    py::array_t<int64_t, py::array::c_style | py::array::forcecast> pos;
    try {
      pos = np.attr("ascontiguousarray")(np.attr("broadcast_to")(np.attr("asarray")(positions, "int64"), lead));
    } catch (py::error_already_set& e) {
      throw py::value_error("rope.rotate: positions do not broadcast to x's leading axes " +
                            py::str(lead).cast<std::string>() + " (" + e.what() + ")");
    }
    py::array_t<float> out(std::vector<py::ssize_t>(in.shape(), in.shape() + in.ndim()));
    float* dst = out.mutable_data();
    std::copy(in.data(), in.data() + in.size(), dst);
    const py::ssize_t rows = in.size() / head_dim;
    const float* cos_sin = nullptr;
    int64_t last = 0;
    for (py::ssize_t r = 0; r < rows; ++r) {
      const int64_t p = pos.data()[r];
      if (p < -(int64_t{1} << 30) || p > (int64_t{1} << 30))
        throw py::value_error("rope.rotate: position " + std::to_string(p) + " is out of range");
      if (!cos_sin || p != last) cos_sin = angles_at(static_cast<int>(p), inverse);
      last = p;
      RopeRotation::rotate(dst + r * head_dim, cos_sin);
    }
    return out;
  }

 private:
  // angles() of each position rotated to, kept across calls: a policy rotates the prompt's positions again in
  // every layer, and the angles are most of the rotation's cost. Bounded: cleared when full. Guarded by the GIL.
  static constexpr std::size_t kMaxPositions = std::size_t{1} << 16;
  // Keyed by position and direction: with an attention factor the inverse is not the rotation by -position.
  std::unordered_map<int64_t, std::vector<float>> angles_;

  const float* angles_at(int position, bool inverse) {
    const int64_t key = static_cast<int64_t>(position) * 2 + (inverse ? 1 : 0);
    auto it = angles_.find(key);
    if (it == angles_.end()) {
      if (angles_.size() >= kMaxPositions) angles_.clear();
      it = angles_.emplace(key, std::vector<float>(rope_dim)).first;
      angles(position, it->second.data(), inverse);
    }
    return it->second.data();
  }
};

}  // namespace

py::object make_python_rope(const model::ModelConfig& config) {
  auto rope = std::make_shared<Rope>(config);

  // The engine's per-pair frequency, float32 as it computes it.
  py::array_t<double> inv_freq(rope->rope_dim / 2), divisors(rope->rope_dim / 2);
  for (int i = 0; i < rope->rope_dim / 2; ++i) {
    divisors.mutable_at(i) = rope->divisor(i);
    inv_freq.mutable_at(i) =
        powf(rope->base, -2.0f * static_cast<float>(i) / static_cast<float>(rope->rope_dim)) / rope->divisor(i);
  }
  // The fields of each scaling type, as transformers' rope_parameters name them (docs/policies.md, obs.rope).
  const auto& s = config.rope_scaling;
  py::dict scaling;
  scaling["type"] = s.type;
  const bool scaled = s.type != "default" && s.type != "rope_freqs";
  if (scaled) scaling["factor"] = s.factor;
  if (s.type == "linear" || s.type == "longrope" || s.type == "yarn") scaling["attention_factor"] = s.attention_factor;
  if (s.type == "llama3" || s.type == "longrope" || s.type == "yarn")
    scaling["original_max_position_embeddings"] = s.original_context;
  if (s.type == "longrope") {  // divisors, inv_freq and rotate() are the short factors'
    py::list short_factor, long_factor;
    for (float f : s.short_factor) short_factor.append(f);
    for (float f : s.long_factor) long_factor.append(f);
    scaling["short_factor"] = short_factor;
    scaling["long_factor"] = long_factor;
  }
  if (s.type == "llama3") {
    scaling["low_freq_factor"] = s.low_freq_factor;
    scaling["high_freq_factor"] = s.high_freq_factor;
  }
  if (s.type == "yarn") {
    scaling["beta_fast"] = s.beta_fast;
    scaling["beta_slow"] = s.beta_slow;
    scaling["truncate"] = s.truncate;
    scaling["ext_factor"] = s.ext_factor;
  }
  py::cpp_function rotate(
      [rope](const py::object& x, const py::object& positions, bool inverse) {
        return rope->rotate(x, positions, inverse);
      },
      py::arg("x"), py::arg("positions"), py::arg("inverse") = false,
      "x (..., head_dim) rotated to `positions` (broadcast to x.shape[:-1]), or back from them with inverse=True, "
      "as the engine rotates keys and queries (cos and sin times attention_factor)");
  return py::module_::import("types").attr("SimpleNamespace")(
      py::arg("theta") = static_cast<double>(rope->base), py::arg("rope_dim") = rope->rope_dim,
      py::arg("head_dim") = rope->head_dim, py::arg("pairing") = rope->adjacent ? "adjacent" : "half",
      py::arg("scaling") = scaling, py::arg("attention_factor") = static_cast<double>(rope->scale),
      py::arg("divisors") = divisors, py::arg("inv_freq") = inv_freq, py::arg("rotate") = rotate);
}

}  // namespace kvscope::policy
