#pragma once
// KVMerger's split of the prompt into recent tokens, heavy hitters and merge candidates as the budget
// changes. The paper gives two configurations (§6.1): at a 50 % budget 0.17 of the prompt are recent
// tokens and 0.12 heavy hitters; at 35 %, 0.08 and 0.02. Between the anchors each share moves linearly
// with the budget ratio r = b / n; outside them it keeps the nearest anchor's proportion to r, so below
// 35 % the recent and heavy shares shrink with the budget and merged entries keep 71 % of it (at a fixed
// 0.17 / 0.12 nothing is left to merge below r = 0.29). See docs/policies.md, "kvmerger".
namespace kvscope::policy {

struct KVMergerShares {
  double recent = 0.0;  // of the prompt length n
  double heavy = 0.0;
};

KVMergerShares kvmerger_shares(double budget_ratio);

}  // namespace kvscope::policy
