// What compose's second policy sees when it reads attention (compose_subset.h): torch.topk's order, the order kvpress's
// first press hands its entries on, and attention recomputed over them, against torch's outputs and a hand computation.
#include "core/policy/compose_subset.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/policy/torch_topk.h"

using namespace kvscope;
using namespace kvscope::policy;

TEST_CASE("torch_topk_order returns torch.topk's order, ties included", "[compose]") {
  // torch 2.15 (CPU): s.topk(30).indices and s.topk(3).indices of these 40 values, most of them tied at 2.
  const std::vector<double> s = {0.5, 2, 2, 1, 2, 0.5, 3, 2, 2, 2, 1, 2, 2, 2, 2, 2, 2, 2, 0,    2,
                                 2,   2, 1.5, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0.25, 2, 2, 2, 2, 2, 2};
  CHECK(torch_topk_order(s, 30) == std::vector<int32_t>{6,  26, 14, 12, 19, 9,  8,  7,  4,  2,  1,  11, 21, 23, 24,
                                                        25, 20, 27, 28, 29, 30, 31, 32, 34, 35, 36, 37, 38, 39, 17});
  CHECK(torch_topk_order(s, 3) == std::vector<int32_t>{6, 28, 27});
  // k * 64 <= n: torch's partial_sort path; (7 j) % 5 over 200 entries, topk(3).
  std::vector<double> t(200);
  for (int j = 0; j < 200; ++j) t[j] = (j * 7) % 5;
  CHECK(torch_topk_order(t, 3) == std::vector<int32_t>{12, 7, 2});
}

TEST_CASE("kvpress_handoff_order puts the protected entries first, then by score", "[compose]") {
  //                              0    1    2    3    4    5
  const std::vector<double> ranking = {0.1, 0.9, 0.3, 0.7, 0.0, 0.0};
  // The last two protected (SnapKV's window, padded above every score), then 1 and 3 by score.
  const auto order = kvpress_handoff_order(ranking, {1, 3, 4, 5}, 0, 2);
  REQUIRE(order.size() == 4);
  CHECK(std::vector<int32_t>(order.begin() + 2, order.end()) == std::vector<int32_t>{1, 3});
  CHECK(((order[0] == 4 && order[1] == 5) || (order[0] == 5 && order[1] == 4)));
}

TEST_CASE("subset_attention_observation recomputes attention over the handed-on entries with kvpress's mask",
          "[compose]") {
  // One KV head, one query head, head_dim 2; four entries, of which 3, 0, 2 are handed on in that order.
  cache::KVCache cache(1, 1, 2);
  const std::vector<float> keys = {1, 0, 0, 1, 1, 1, -1, 2}, values(8, 0.0f);
  const std::vector<int32_t> positions = {0, 1, 2, 3};
  cache.append(0, keys.data(), values.data(), 4, positions.data());
  observation::AttentionObservation obs;
  obs.n_heads = obs.n_kv_heads = 1;
  obs.query_positions = {2, 3};
  obs.queries = {0.5f, 1.0f, 2.0f, -1.0f};  // two queries
  observation::ObservationRequest need;
  need.window = 2;
  need.window_sums = need.last_row = true;
  const std::vector<int32_t> order = {3, 0, 2};
  const auto sub = subset_attention_observation(obs, cache, {order}, need);
  REQUIRE(sub.n_keys == std::vector<int>{3});
  REQUIRE(sub.window == 2);
  // Query i of n = 2 sees the first k - n + i + 1 handed-on entries: query 0 entries 3 and 0, query 1 all three.
  auto softmax = [&](int q, int visible) {
    std::vector<double> p(3, 0.0);
    double sum = 0.0;
    for (int j = 0; j < visible; ++j) {
      const float* k = keys.data() + order[j] * 2;
      p[j] = std::exp((obs.queries[q * 2] * k[0] + obs.queries[q * 2 + 1] * k[1]) / std::sqrt(2.0));
      sum += p[j];
    }
    for (double& v : p) v /= sum;
    return p;
  };
  const auto p0 = softmax(0, 2), p1 = softmax(1, 3);
  for (int j = 0; j < 3; ++j) {
    CHECK(sub.window_sums[0][j] == Approx(p0[j] + p1[j]).epsilon(1e-6));
    CHECK(sub.last_row[0][j] == Approx(p1[j]).epsilon(1e-6));
  }
  // The per-query parts stay the layer's.
  CHECK(sub.queries == obs.queries);
  CHECK(sub.query_positions == obs.query_positions);
  // A head's subset view: every head holds the handed-on entries, in that order.
  const cache::KVCache view = head_subset_cache(cache, 0, 0, order);
  CHECK(std::vector<int32_t>(view.positions(0, 0).begin(), view.positions(0, 0).end()) == order);
}
