/* A plugin built against a future ABI: kvscope must refuse it, naming both versions. */
#include "kvscope/policy_plugin.h"

static int32_t score(const kvscope_observation* obs, float* scores, char* error, size_t error_size) {
  (void)obs, (void)scores, (void)error, (void)error_size;
  return 0;
}

static const kvscope_policy_plugin plugin = {.abi_version = 999, .name = "future", .score = score};

const kvscope_policy_plugin* KVSCOPE_POLICY_PLUGIN_ENTRY(void) { return &plugin; }
