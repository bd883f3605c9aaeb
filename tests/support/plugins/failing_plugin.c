/* A scorer that reports a failure: the run fails with its message. */
#include <stdio.h>

#include "kvscope/policy_plugin.h"

static int32_t score(const kvscope_observation* obs, float* scores, char* error, size_t error_size) {
  (void)scores;
  snprintf(error, error_size, "scorer refuses layer %d", obs->layer);
  return 1;
}

static const kvscope_policy_plugin plugin = {.abi_version = KVSCOPE_POLICY_ABI_VERSION, .name = "failing", .score = score};

const kvscope_policy_plugin* KVSCOPE_POLICY_PLUGIN_ENTRY(void) { return &plugin; }
