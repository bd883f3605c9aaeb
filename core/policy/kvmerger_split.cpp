#include "core/policy/kvmerger_split.h"

namespace kvscope::policy {

namespace {
// §6.1's two configurations: (budget ratio, recent share, heavy-hitter share).
constexpr double kLowRatio = 0.35, kLowRecent = 0.08, kLowHeavy = 0.02;
constexpr double kHighRatio = 0.50, kHighRecent = 0.17, kHighHeavy = 0.12;
}  // namespace

KVMergerShares kvmerger_shares(double r) {
  if (r <= kLowRatio) return {kLowRecent * r / kLowRatio, kLowHeavy * r / kLowRatio};
  if (r >= kHighRatio) return {kHighRecent * r / kHighRatio, kHighHeavy * r / kHighRatio};
  const double t = (r - kLowRatio) / (kHighRatio - kLowRatio);
  return {kLowRecent + t * (kHighRecent - kLowRecent), kLowHeavy + t * (kHighHeavy - kLowHeavy)};
}

}  // namespace kvscope::policy
