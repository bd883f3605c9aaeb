#include "core/policy/policy_layers.h"

#include <limits>

namespace kvscope::policy {

PolicyLayers::PolicyLayers(const kernels::ModelShape& config, SwaMode mode)
    : slot_of_(config.n_layers, -1), sliding_window_(config.sliding_window) {
  for (int l = 0; l < config.n_layers; ++l) {
    if (config.is_local(l) && mode != SwaMode::Compress) continue;
    slot_of_[l] = static_cast<int>(layers_.size());
    layers_.push_back(l);
  }
}

observation::AttentionObservation PolicyLayers::renumbered(const observation::AttentionObservation& obs) const {
  observation::AttentionObservation copy = obs;
  copy.layer = slot(obs.layer);
  return copy;
}

void PolicyLayers::publish_to_model_layers(const Diagnostics& from, Diagnostics& to) const {
  for (const auto& [name, series] : from.all()) {
    Series widened = series;
    for (std::size_t axis = 0; axis < series.dims.size() && axis < series.shape.size(); ++axis) {
      if (series.dims[axis] != "layer" || series.shape[axis] != size() || every_layer()) continue;
      // Row-major: `outer` blocks of size() x `inner` values become `outer` blocks of model_layers() x `inner`.
      long outer = 1, inner = 1;
      for (std::size_t a = 0; a < axis; ++a) outer *= series.shape[a];
      for (std::size_t a = axis + 1; a < series.shape.size(); ++a) inner *= series.shape[a];
      std::vector<double> values(static_cast<std::size_t>(outer * model_layers() * inner),
                                 std::numeric_limits<double>::quiet_NaN());
      for (long o = 0; o < outer; ++o)
        for (int s = 0; s < size(); ++s)
          for (long i = 0; i < inner; ++i)
            values[static_cast<std::size_t>((o * model_layers() + layers_[s]) * inner + i)] =
                series.values[static_cast<std::size_t>((o * size() + s) * inner + i)];
      widened.values = std::move(values);
      widened.shape[axis] = model_layers();
      widened.description += " (NaN: sliding-window layers, which the policy leaves to their window)";
      break;
    }
    to.set(name, std::move(widened));
  }
  for (const auto& [name, value] : from.settings()) to.set_setting(name, value);
  for (const std::string& w : from.warnings()) to.warn(w);
}

}  // namespace kvscope::policy
