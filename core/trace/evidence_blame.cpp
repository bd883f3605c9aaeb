#include "core/trace/evidence_blame.h"

#include <algorithm>
#include <cmath>

#include "core/common/error.h"
#include "core/trace/exact_attention.h"

namespace kvscope::trace {

namespace {

void check_same_sample(const RunTrace& policy, const EvalRunInfo& pi, const RunTrace& full, const EvalRunInfo& fi) {
  auto differ = [&](const std::string& what, long long a, long long b) {
    throw Error("runs '" + policy.name + "' and '" + full.name + "' are not the same sample on the same model: " +
                what + " " + std::to_string(a) + " vs " + std::to_string(b));
  };
  if (policy.n_layers != full.n_layers) differ("layers", policy.n_layers, full.n_layers);
  if (policy.n_heads != full.n_heads) differ("heads", policy.n_heads, full.n_heads);
  if (policy.n_kv_heads != full.n_kv_heads) differ("KV heads", policy.n_kv_heads, full.n_kv_heads);
  if (policy.prompt_length != full.prompt_length) differ("prompt tokens", policy.prompt_length, full.prompt_length);
  if (pi.appended_tokens != fi.appended_tokens) differ("appended tokens", pi.appended_tokens, fi.appended_tokens);
  if (policy.prompt_ids != full.prompt_ids)
    throw Error("runs '" + policy.name + "' and '" + full.name + "' ran different prompts");
  for (int i = 0; i < pi.appended_tokens; ++i)
    if (policy.generated_ids[i] != full.generated_ids[i])
      throw Error("runs '" + policy.name + "' and '" + full.name + "' were fed different appended tokens (at " +
                  std::to_string(i) + ")");
}

}  // namespace

std::vector<HeadBlame> EvidenceBlame::largest(int n) const {
  std::vector<HeadBlame> out = heads;
  std::stable_sort(out.begin(), out.end(), [](const HeadBlame& a, const HeadBlame& b) {
    if (std::isnan(a.lost_mass) != std::isnan(b.lost_mass)) return std::isnan(b.lost_mass);
    return a.lost_mass > b.lost_mass;
  });
  if (static_cast<int>(out.size()) > n) out.resize(static_cast<std::size_t>(std::max(0, n)));
  return out;
}

EvidenceBlame evidence_blame(const RunTrace& policy, const EvalRunInfo& pi, const RunTrace& full, const EvalRunInfo& fi,
                             const std::vector<int>& evidence_positions) {
  check_same_sample(policy, pi, full, fi);
  if (!ExactAttention::available(full))
    throw Error("full-cache run '" + full.name +
                "' holds no queries and keys (recorded without --record qk=on): the attention it paid to "
                "what the policy evicted cannot be rebuilt");
  if (static_cast<int>(policy.kept_mask.size()) != policy.n_layers)
    throw Error("run '" + policy.name + "' has kept masks for " + std::to_string(policy.kept_mask.size()) + " of its " +
                std::to_string(policy.n_layers) + " layers: what it evicted cannot be read");

  EvidenceBlame b;
  const std::vector<int> pa = answer_ids(policy, pi), fa = answer_ids(full, fi);
  const auto mismatch =
      std::mismatch(pa.begin(), pa.begin() + static_cast<std::ptrdiff_t>(std::min(pa.size(), fa.size())), fa.begin());
  b.divergence = static_cast<int>(mismatch.first - pa.begin());
  b.diverged = b.divergence < static_cast<int>(std::min(pa.size(), fa.size())) || pa.size() != fa.size();
  if (!b.diverged) b.divergence = 0;
  b.query = pi.prompt_tokens + pi.appended_tokens - 1 + b.divergence;
  b.mask_step = pi.first_answer_step + std::max(0, b.divergence - 1);
  if (b.mask_step >= policy.n_steps())
    throw Error("run '" + policy.name + "' has " + std::to_string(policy.n_steps()) + " steps, short of step " +
                std::to_string(b.mask_step) + " that sampled answer token " +
                std::to_string(std::max(0, b.divergence - 1)));
  const int processed = policy.steps[b.mask_step].seq_len;

  std::vector<char> evidence(static_cast<std::size_t>(b.query) + 1, 0);
  for (int p : evidence_positions)
    if (p >= 0 && p <= b.query) evidence[static_cast<std::size_t>(p)] = 1;

  b.n_lost.assign(policy.n_layers, std::vector<int>(policy.n_kv_heads, 0));
  const int group = std::max(1, policy.n_heads / std::max(1, policy.n_kv_heads));
  for (int l = 0; l < policy.n_layers; ++l) {
    const KeptMask& mask = policy.kept_mask[static_cast<std::size_t>(l)];
    if (b.mask_step >= mask.n_steps || mask.n_kv_heads != policy.n_kv_heads || b.query >= mask.n_positions)
      throw Error("run '" + policy.name + "': the kept mask of layer " + std::to_string(l) + " does not reach step " +
                  std::to_string(b.mask_step) + " and position " + std::to_string(b.query));
    std::vector<std::vector<char>> lost(static_cast<std::size_t>(policy.n_kv_heads),
                                        std::vector<char>(evidence.size(), 0));
    for (int g = 0; g < policy.n_kv_heads; ++g)
      for (int j = 0; j <= b.query && j < processed; ++j)
        if (mask.at(g, j, b.mask_step) != kKept) lost[g][j] = 1, ++b.n_lost[l][g];
    if (!ExactAttention::available(full, l)) {
      b.layers_without_qk.push_back(l);
      continue;
    }
    for (int h = 0; h < policy.n_heads; ++h) {
      const ExactAttention exact(full, l, h);
      if (b.query >= exact.n_queries())
        throw Error("full-cache run '" + full.name + "' has no query for position " + std::to_string(b.query) +
                    " (answer token " + std::to_string(b.divergence) + "): it recorded " +
                    std::to_string(exact.n_queries()) + " positions");
      const std::vector<float> row =
          exact.region(b.query, b.query + 1, 0, b.query + 1, 1, b.query + 1, Pooling::Max).map.values;
      HeadBlame hb;
      hb.layer = l, hb.head = h;
      const std::vector<char>& e = lost[static_cast<std::size_t>(h / group)];
      for (int j = 0; j <= b.query; ++j) {
        const double p = row[static_cast<std::size_t>(j)];
        if (e[j]) hb.lost_mass += p;
        if (evidence[j]) hb.evidence_mass += p;
        if (e[j] && evidence[j]) hb.evidence_lost_mass += p;
      }
      b.heads.push_back(hb);
    }
  }
  int counted = 0;
  b.mean_lost_mass = 0.0;
  for (const HeadBlame& h : b.heads)
    if (!std::isnan(h.lost_mass))
      b.mean_lost_mass += h.lost_mass, b.max_lost_mass = std::max(b.max_lost_mass, h.lost_mass), ++counted;
  b.mean_lost_mass = counted ? b.mean_lost_mass / counted : std::nan("");
  return b;
}

}  // namespace kvscope::trace
