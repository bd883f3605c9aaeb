/* A scorer that writes through a null pointer (issue 34): kvscope dies of SIGSEGV, naming this file first. */
#include <stdint.h>

#include "kvscope/policy_plugin.h"

static volatile uintptr_t nowhere = 0; /* volatile: the compiler cannot see the null and trap instead */

static int32_t score(const kvscope_observation* obs, float* scores, char* error, size_t error_size) {
  (void)scores, (void)error, (void)error_size;
  ((float*)nowhere)[obs->kv_head] = 1.0f;
  return 0;
}

static const kvscope_policy_plugin plugin = {.abi_version = KVSCOPE_POLICY_ABI_VERSION, .name = "crashing", .score = score};

const kvscope_policy_plugin* KVSCOPE_POLICY_PLUGIN_ENTRY(void) { return &plugin; }
