// PyramidKV's allocation (Cai et al., 2024, "PyramidKV: Dynamic KV Cache Compression based on Pyramidal
// Information Funneling", §3, KV cache size allocation): attention gets sparser with depth, so budgets
// fall linearly from the bottom layer to the top one while their sum stays L * average.
// See docs/policies.md, "Allocation: pyramid".
#include <algorithm>
#include <cmath>

#include "core/policy/allocation_catalog.h"

namespace kvscope::policy {

namespace {

class PyramidAllocation final : public LayerAllocation {
 public:
  PyramidAllocation(double beta, bool kvpress) : beta_(beta), kvpress_(kvpress) {}
  std::string name() const override { return "pyramid"; }
  observation::ObservationRequest request(int) const override { return {}; }
  void observe(const observation::AttentionObservation&) override {}

  std::vector<int> budgets(int n_layers, int average_budget, int seq_len) override {
    if (kvpress_) return kvpress_budgets(n_layers, average_budget, seq_len);
    const int reserved = std::max(reserved_, 0);
    top_ = bottom_ = std::max(average_budget - reserved, 0);
    if (n_layers <= 1 || average_budget >= seq_len || average_budget <= reserved)
      return std::vector<int>(n_layers, std::clamp(average_budget, 1, std::max(seq_len, 1)));
    // Only the budget above the reserved tokens (SnapKV's window) forms the pyramid, as in the
    // reference code: top = (avg - w) / beta, bottom = 2 (avg - w) - top, so the mean stays avg - w.
    const double extra = average_budget - reserved;
    const double room = seq_len - reserved;  // no layer can keep more than the prompt
    top_ = extra / beta_;
    bottom_ = 2.0 * extra - top_;
    if (bottom_ > room) {
      // The reference code caps the bottom layer at the prompt and raises the top to keep the mean.
      bottom_ = room;
      top_ = 2.0 * extra - bottom_;
    }
    std::vector<double> weights(n_layers);
    for (int l = 0; l < n_layers; ++l) weights[l] = bottom_ - (bottom_ - top_) * l / (n_layers - 1);
    // Real-valued shares rounded by largest remainder: the sum is exactly L * avg, where the reference
    // code's integer divisions lose up to L tokens.
    std::vector<int> out = proportional_budgets(weights, static_cast<long>(n_layers) * (average_budget - reserved),
                                                reserved >= 1 ? 0 : 1, seq_len - reserved);
    for (int& b : out) b += reserved;
    return out;
  }

  void publish(Diagnostics& out) const override {
    out.set("pyramid_ends", {{bottom_, top_},
                             {2},
                             {"end"},
                             "PyramidKV §3: tokens above the reserved window at the bottom and top layer "
                             "(before rounding); budgets fall linearly between them"});
  }

 private:
  // kvpress 0.5.5's PyramidKVPress.get_layer_budget, operation for operation in double (Python's floats): the
  // window counts inside the budget, the mean is the real n (1 - R) (not the truncated average), a pyramid whose
  // top layer would keep less than the window falls back to a uniform budget, and each layer's budget is
  // rounded on its own, halves to even (Python's round), so the total is not exactly L x budget.
  std::vector<int> kvpress_budgets(int n_layers, int average_budget, int seq_len) {
    const double w = std::max(reserved_, 0), q_len = seq_len;
    const double kept = compression_ratio_ >= 0.0 ? q_len * (1.0 - compression_ratio_) : average_budget;
    const double max_capacity = w + kept;
    const auto round_half_even = [](double x) { return static_cast<int>(std::nearbyint(x)); };  // FE_TONEAREST
    top_ = (max_capacity - w) / beta_;
    bottom_ = (max_capacity - w) * 2 - top_;
    if (bottom_ >= q_len - w) {
      bottom_ = q_len - w;
      top_ = (max_capacity - w) * 2 - bottom_;
    }
    if (!(q_len >= bottom_ && bottom_ >= top_ && top_ >= w) || n_layers <= 1)
      return std::vector<int>(n_layers, std::clamp(round_half_even(kept), 1, seq_len));
    const double steps = (bottom_ - top_) / (n_layers - 1);
    std::vector<int> out(n_layers);
    for (int l = 0; l < n_layers; ++l) out[l] = std::clamp(round_half_even(bottom_ - l * steps), 1, seq_len);
    return out;
  }

  double beta_;
  bool kvpress_;
  double bottom_ = 0.0, top_ = 0.0;
};

}  // namespace

AllocationInfo pyramid_allocation_info() {
  return {"pyramid",
          "budgets fall linearly from the bottom layer to the top (PyramidKV), summing to L x budget",
          "Cai et al. 2024, PyramidKV, §3 (KV cache size allocation)",
          {ParamSpec::real("beta", 20.0, 1.0, 1000.0,
                           "PyramidKV §3: top layer keeps (budget - window) / beta above the window; the "
                           "bottom keeps 2 (budget - window) minus that; larger beta, steeper pyramid"),
           ParamSpec::choice("pyramid_arithmetic", "reference", {"reference", "kvpress"},
                             "reference: the authors' code (window on top of the pyramid, total exactly L x budget); "
                             "kvpress: kvpress's PyramidKVPress (window inside the budget, mean n (1 - R), uniform "
                             "fallback when the top layer would hold less than the window, per-layer rounding)")},
          [](const PolicyParams& p) {
            return std::make_unique<PyramidAllocation>(p.get_float("beta"),
                                                       p.get_choice("pyramid_arithmetic") == "kvpress");
          }};
}

}  // namespace kvscope::policy
