#pragma once
// Mixture-of-experts runs: what each layer's router chose per token (the weight on each chosen expert, one
// layer at a time), and, beside a full-cache run of the same prompt, how many of those experts the full cache's
// router also chose (every layer at once): where a policy's evictions moved the router (issue 39).
#include "viewers/panel.h"

namespace kvscope::viewers {

class RouterMap final : public Panel {
 public:
  RouterMap() : Panel("router", "Router") {}
  void draw(AppState& state) override;
  Figure figure(const AppState& state) override;

 private:
  void update(const AppState& state);
  std::string signature_, why_;
  HeatmapPlot weights_, agreement_;
  bool have_weights_ = false, have_agreement_ = false;
};

// Experts x tokens of `layer`: the weight the router gave each expert it chose. False with `why` for a dense run.
bool router_weights_plot(const trace::RunTrace& run, int layer, HeatmapPlot& out, std::string& why);
// Layers x tokens: the share of `run`'s chosen experts that `baseline` (the full cache) also chose; NaN where the
// runs fed different tokens. False with `why` when either has no routing.
bool router_agreement_plot(const trace::RunTrace& run, const trace::RunTrace& baseline, HeatmapPlot& out,
                           std::string& why);

}  // namespace kvscope::viewers
