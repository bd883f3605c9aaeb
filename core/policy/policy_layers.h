#pragma once
// The layers a policy decides: every layer, or under swa=skip|window only the model's global layers, since the
// engine shows a policy no sliding-window layer in those modes (swa_mode.h). A policy that spreads one budget
// over layers (an allocation, D2O, DynamicKV, CAKE) spreads it over these, numbered 0..size()-1 ("slots"), so
// that a local layer, which holds its window whatever the policy says, takes no share it would never use.
#include <algorithm>
#include <vector>

#include "core/observation/attention_observation.h"
#include "core/policy/diagnostics.h"
#include "core/policy/swa_mode.h"
#include "kernels/model_shape.h"

namespace kvscope::policy {

class PolicyLayers {
 public:
  PolicyLayers() = default;
  PolicyLayers(const kernels::ModelShape& config, SwaMode mode);

  int size() const { return static_cast<int>(layers_.size()); }
  int model_layers() const { return static_cast<int>(slot_of_.size()); }
  // True when the policy decides every layer of the model (no local layers, or swa=compress).
  bool every_layer() const { return size() == model_layers(); }
  int layer(int slot) const { return layers_[slot]; }
  // The slot of a model layer, or -1 for a layer the policy does not decide.
  int slot(int layer) const { return slot_of_[layer]; }
  // What a layer the policy does not decide holds after `seq_len` tokens: its window, or all of them.
  int window_hold(int seq_len) const { return sliding_window_ > 0 ? std::min(sliding_window_, seq_len) : seq_len; }

  // `obs` as if its layer were the slot of its model layer (a copy; only made where slots differ from layers).
  observation::AttentionObservation renumbered(const observation::AttentionObservation& obs) const;
  // One value per slot spread to one per model layer, `fill` for the layers the policy does not decide.
  template <class T>
  std::vector<T> to_model_layers(const std::vector<T>& per_slot, T fill) const {
    std::vector<T> out(slot_of_.size(), fill);
    for (int s = 0; s < size() && s < static_cast<int>(per_slot.size()); ++s) out[layers_[s]] = per_slot[s];
    return out;
  }
  // Every series of `from` with a "layer" dimension of size() entries is widened to model_layers() (NaN for
  // the layers the policy does not decide) and set in `to`, with `from`'s settings and warnings, so that a
  // trace's per-layer series line up with the model's layers.
  void publish_to_model_layers(const Diagnostics& from, Diagnostics& to) const;

 private:
  std::vector<int> layers_;   // slot -> model layer
  std::vector<int> slot_of_;  // model layer -> slot or -1
  int sliding_window_ = 0;
};

}  // namespace kvscope::policy
