/* H2O (Zhang et al. 2023, Algorithm 1) as a compiled plugin: a token's score is the attention it has received
 * so far, accumulated in obs->state so that it follows the entry through evictions; floor(recent_ratio x
 * budget) recent tokens are kept whatever their score. Evicts after the prompt and at every decode step, as
 * kvscope's built-in `h2o` does, and keeps the same tokens (tests/e2e/user_policy_test.cpp). */
#include <math.h>

#include "kvscope/policy_plugin.h"

static const kvscope_param_spec params[] = {
    {"recent_ratio", KVSCOPE_PARAM_FLOAT, 0.5, 0.0, 1.0, "share of the budget kept for the most recent tokens"},
};

static int32_t score(const kvscope_observation* obs, float* scores, char* error, size_t error_size) {
  (void)error;
  (void)error_size;
  /* The built-in adds each query head's sums in turn, in float; doing the same keeps the sums bit-identical. */
  for (int32_t q = 0; q < obs->group; ++q)
    for (int32_t j = 0; j < obs->n_entries; ++j) obs->state[j] += obs->column_sums[q][j];
  for (int32_t j = 0; j < obs->n_entries; ++j) scores[j] = obs->state[j];
  return 0;
}

static int32_t recent(int32_t budget, const double* values) { return (int32_t)floor(values[0] * budget); }

static const kvscope_policy_plugin plugin = {
    .abi_version = KVSCOPE_POLICY_ABI_VERSION,
    .name = "h2o",
    .summary = "heavy hitters plus recent tokens (H2O), as a C plugin",
    .params = params,
    .n_params = 1,
    .needs = KVSCOPE_NEEDS_COLUMN_SUMS,
    .block = 0,
    .decode_evict = 1,
    .trim_before_output = 0,
    .score = score,
    .recent = recent,
    .sinks = 0,
};

const kvscope_policy_plugin* KVSCOPE_POLICY_PLUGIN_ENTRY(void) { return &plugin; }
