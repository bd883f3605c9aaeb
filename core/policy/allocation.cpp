// The allocation registry, the shared largest-remainder arithmetic and the uniform allocation.
#include "core/policy/allocation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/common/error.h"
#include "core/policy/allocation_catalog.h"

namespace kvscope::policy {

const std::vector<AllocationInfo>& all_allocations() {
  static const std::vector<AllocationInfo> allocations = {
      uniform_allocation_info(),
      pyramid_allocation_info(),
      d2o_allocation_info(),
      dynamickv_allocation_info(),
      cake_allocation_info(),
      per_layer_allocation_info(),
  };
  return allocations;
}

const AllocationInfo& find_allocation(const std::string& name) {
  for (const auto& info : all_allocations())
    if (info.name == name) return info;
  throw UsageError("unknown allocation '" + name + "'; valid allocations: " + [] {
    std::string names;
    for (const auto& info : all_allocations()) names += (names.empty() ? "" : ", ") + info.name;
    return names;
  }());
}

std::vector<std::string> allocations_declaring(const ParamSpec& spec) {
  std::vector<std::string> names;
  for (const auto& info : all_allocations())
    for (const auto& p : info.params)
      if (p.name == spec.name && p.doc == spec.doc) names.push_back(info.name);
  return names;
}

std::vector<std::string> allocation_names() {
  std::vector<std::string> names;
  for (const auto& info : all_allocations()) names.push_back(info.name);
  return names;
}

std::vector<ParamSpec> allocation_params(const std::string& name) { return find_allocation(name).params; }

std::unique_ptr<LayerAllocation> make_allocation(const std::string& name, const PolicyParams& params) {
  return find_allocation(name).make(params);
}

std::vector<int> proportional_budgets(const std::vector<double>& weights, long total, int min_each, int max_each) {
  const long n = static_cast<long>(weights.size());
  if (n == 0) return {};
  if (min_each > max_each)
    throw Error("proportional_budgets: min_each " + std::to_string(min_each) + " > max_each " +
                std::to_string(max_each));
  bool all_zero = true;
  for (double w : weights) {
    if (!std::isfinite(w) || w < 0.0)
      throw Error("proportional_budgets: weight " + std::to_string(w) + " is not finite and non-negative");
    all_zero = all_zero && w == 0.0;
  }
  const std::vector<double> w = all_zero ? std::vector<double>(n, 1.0) : weights;
  total = std::clamp(total, n * min_each, n * static_cast<long>(max_each));

  // The exact shares are clamp(s * w_i, min, max) for the one scale s that makes them sum to total; their
  // sum grows monotonically with s, so bisection finds it.
  auto shares = [&](double s) {
    std::vector<double> r(n);
    for (long i = 0; i < n; ++i)
      r[i] = std::clamp(s * w[i], static_cast<double>(min_each), static_cast<double>(max_each));
    return r;
  };
  auto sum = [](const std::vector<double>& r) { return std::accumulate(r.begin(), r.end(), 0.0); };
  // At most 2^1000, so that s * 0 stays 0 when zero weights make the total unreachable.
  double lo = 0.0, hi = 1.0;
  for (int i = 0; i < 1000 && sum(shares(hi)) < static_cast<double>(total); ++i) hi *= 2.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (sum(shares(mid)) < static_cast<double>(total) ? lo : hi) = mid;
  }
  const std::vector<double> exact = shares(hi);

  // Largest remainder: floors first, then one more token to the largest fractional parts (ties to the
  // lower layer). The loops also absorb what floating point or unreachable totals (zero weights stuck at
  // min_each) leave over, so the sum is exact whenever the clamped total is.
  std::vector<int> out(n);
  std::vector<double> frac(n);
  long assigned = 0;
  for (long i = 0; i < n; ++i) {
    out[i] = std::clamp(static_cast<int>(std::floor(exact[i])), min_each, max_each);
    frac[i] = exact[i] - out[i];
    assigned += out[i];
  }
  std::vector<long> order(n);
  std::iota(order.begin(), order.end(), 0L);
  std::stable_sort(order.begin(), order.end(), [&](long a, long b) { return frac[a] > frac[b]; });
  while (assigned < total) {
    for (long i : order)
      if (assigned < total && out[i] < max_each) ++out[i], ++assigned;
  }
  while (assigned > total) {
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      if (assigned > total && out[*it] > min_each) --out[*it], --assigned;
  }
  return out;
}

namespace {

class UniformAllocation final : public LayerAllocation {
 public:
  std::string name() const override { return "uniform"; }
  observation::ObservationRequest request(int) const override { return {}; }
  void observe(const observation::AttentionObservation&) override {}
  std::vector<int> budgets(int n_layers, int average_budget, int seq_len) override {
    return std::vector<int>(n_layers, std::clamp(average_budget, 1, std::max(seq_len, 1)));
  }
};

}  // namespace

AllocationInfo uniform_allocation_info() {
  return {"uniform", "every layer keeps the average budget", "-", {}, [](const PolicyParams&) {
            return std::make_unique<UniformAllocation>();
          }};
}

}  // namespace kvscope::policy
