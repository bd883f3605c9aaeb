/* A scorer that ends the process with exit(0) (issue 34): kvscope must not exit 0, and must name this file. */
#include <stdlib.h>

#include "kvscope/policy_plugin.h"

static int32_t score(const kvscope_observation* obs, float* scores, char* error, size_t error_size) {
  (void)obs, (void)scores, (void)error, (void)error_size;
  exit(0);
}

static const kvscope_policy_plugin plugin = {.abi_version = KVSCOPE_POLICY_ABI_VERSION, .name = "exiting", .score = score};

const kvscope_policy_plugin* KVSCOPE_POLICY_PLUGIN_ENTRY(void) { return &plugin; }
