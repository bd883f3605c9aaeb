/* Key-norm scoring (kvpress's KnormPress): keys with a small L2 norm draw attention, so the score is the
 * negated norm of each cached key. Compresses the prompt once; decode tokens are appended. */
#include <math.h>

#include "kvscope/policy_plugin.h"

static int32_t score(const kvscope_observation* obs, float* scores, char* error, size_t error_size) {
  (void)error;
  (void)error_size;
  for (int32_t j = 0; j < obs->n_entries; ++j) {
    const float* k = obs->keys + (size_t)j * obs->head_dim;
    double sum = 0.0;
    for (int32_t i = 0; i < obs->head_dim; ++i) sum += (double)k[i] * k[i];
    scores[j] = (float)-sqrt(sum);
  }
  return 0;
}

static const kvscope_policy_plugin plugin = {
    .abi_version = KVSCOPE_POLICY_ABI_VERSION,
    .name = "key_norm",
    .summary = "negated L2 norm of each key (KnormPress), as a C plugin",
    .params = 0,
    .n_params = 0,
    .needs = 0,
    .block = 0,
    .decode_evict = 0,
    .trim_before_output = 0,
    .score = score,
    .recent = 0,
    .sinks = 0,
};

const kvscope_policy_plugin* KVSCOPE_POLICY_PLUGIN_ENTRY(void) { return &plugin; }
