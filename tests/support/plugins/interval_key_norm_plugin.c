/* Key-norm scoring (as examples/plugins/key_norm_plugin.c) that evicts while decoding and states its decode
 * interval by declaring the parameter `decode_interval` (default 3), and `prefill_evict` (default 1). It fails the
 * run when it is called at a decode step the interval skips, at a decode eviction whose queries are not the
 * `decode_interval` buffered steps', or after the prefill with prefill_evict=0, so a run that completes shows the
 * switches reached kvscope and score(). */
#include <math.h>
#include <stdio.h>

#include "kvscope/policy_plugin.h"

static int32_t score(const kvscope_observation* obs, float* scores, char* error, size_t error_size) {
  const int32_t interval = (int32_t)obs->params[0];
  if (obs->phase == KVSCOPE_PHASE_DECODE && (obs->step + 1) % interval != 0) {
    snprintf(error, error_size, "called at decode step %d, which decode_interval %d skips", obs->step, interval);
    return 1;
  }
  if (obs->phase == KVSCOPE_PHASE_DECODE && obs->n_queries != interval) {
    snprintf(error, error_size, "decode step %d sees %d queries, not the %d buffered steps'", obs->step,
             obs->n_queries, interval);
    return 1;
  }
  if (obs->phase == KVSCOPE_PHASE_PREFILL && obs->params[1] == 0.0) {
    snprintf(error, error_size, "called after the prefill, which prefill_evict=0 leaves whole");
    return 1;
  }
  for (int32_t j = 0; j < obs->n_entries; ++j) {
    const float* k = obs->keys + (size_t)j * obs->head_dim;
    double sum = 0.0;
    for (int32_t i = 0; i < obs->head_dim; ++i) sum += (double)k[i] * k[i];
    scores[j] = (float)-sqrt(sum);
  }
  return 0;
}

static const kvscope_param_spec params[] = {
    {"decode_interval", KVSCOPE_PARAM_INT, 3, 1, 1 << 20, "evict at every third decode step"},
    {"prefill_evict", KVSCOPE_PARAM_BOOL, 1, 0, 1, "evict after the prefill"}};

static const kvscope_policy_plugin plugin = {.abi_version = KVSCOPE_POLICY_ABI_VERSION,
                                             .name = "interval_key_norm",
                                             .summary = "key norm, evicting at every decode_interval-th decode step",
                                             .params = params,
                                             .n_params = 2,
                                             .needs = KVSCOPE_NEEDS_QUERIES,
                                             .decode_evict = 1,
                                             .score = score};

const kvscope_policy_plugin* KVSCOPE_POLICY_PLUGIN_ENTRY(void) { return &plugin; }
