/* A scorer that reads the layer's hidden states (ABI 2): each entry's key against the mean of the hidden-state rows
 * it is given, head h reading columns [h * hidden_dim / n_kv_heads, + head_dim) of each row:
 *   score_j = k_j . mean_r hidden[r][h * hidden_dim / n_kv_heads + c], c < head_dim.
 * The mean is over every row the observation holds: the prompt's after the prefill, BlockPress's gathered subset
 * rows under block_scoring (declared here: 16), the buffered steps' at a decode eviction under decode_interval. So
 * the kept sets show which rows reached the plugin; tests/e2e/user_policy_test.cpp holds them to a Python file that
 * computes the same. Fails the run when the hidden states are missing or narrower than a head's slice. */
#include <stdio.h>

#include "kvscope/policy_plugin.h"

static int32_t score(const kvscope_observation* obs, float* scores, char* error, size_t error_size) {
  const int32_t slice = obs->n_kv_heads > 0 ? obs->hidden_dim / obs->n_kv_heads : 0;
  if (!obs->hidden_states || obs->n_queries <= 0 || slice < obs->head_dim) {
    snprintf(error, error_size, "no hidden states (%d rows of %d) at layer %d", obs->n_queries, obs->hidden_dim,
             obs->layer);
    return 1;
  }
  double mean[1024] = {0};
  if (obs->head_dim > 1024) {
    snprintf(error, error_size, "head_dim %d above 1024", obs->head_dim);
    return 1;
  }
  for (int32_t r = 0; r < obs->n_queries; ++r) {
    const float* row = obs->hidden_states + (size_t)r * obs->hidden_dim + (size_t)obs->kv_head * slice;
    for (int32_t c = 0; c < obs->head_dim; ++c) mean[c] += row[c];
  }
  for (int32_t c = 0; c < obs->head_dim; ++c) mean[c] /= obs->n_queries;
  for (int32_t j = 0; j < obs->n_entries; ++j) {
    const float* k = obs->keys + (size_t)j * obs->head_dim;
    double s = 0.0;
    for (int32_t c = 0; c < obs->head_dim; ++c) s += (double)k[c] * mean[c];
    scores[j] = (float)s;
  }
  return 0;
}

static const kvscope_policy_plugin plugin = {.abi_version = KVSCOPE_POLICY_ABI_VERSION,
                                             .name = "hidden_states",
                                             .summary = "keys against the mean hidden-state row (ABI 2)",
                                             .needs = KVSCOPE_NEEDS_HIDDEN_STATES,
                                             .score = score,
                                             .block_scoring = 16};

const kvscope_policy_plugin* KVSCOPE_POLICY_PLUGIN_ENTRY(void) { return &plugin; }
