/* examples/plugins/key_norm_plugin.c as a plugin built for ABI version 1 (policy_plugin_v1.h, that version's header):
 * kvscope must load it and keep what the version-2 example keeps. Its description is followed in memory by values a
 * version-2 field would be read from (block_scoring -7, which kvscope refuses): a kvscope that read beyond version 1's
 * fields of a version-1 description would fail to load it. */
#include <math.h>

#include "policy_plugin_v1.h"

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

static const struct {
  kvscope_policy_plugin plugin;
  int32_t beyond[8];
} built = {{.abi_version = 1u,
            .name = "key_norm_v1",
            .summary = "negated L2 norm of each key, built for ABI version 1",
            .score = score},
           {-7, -7, -7, -7, -7, -7, -7, -7}};

const kvscope_policy_plugin* KVSCOPE_POLICY_PLUGIN_ENTRY(void) { return &built.plugin; }
