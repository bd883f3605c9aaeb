/* A parameter whose default lies outside its own range (issue 34): refused at load, naming it. */
#include "kvscope/policy_plugin.h"

static int32_t score(const kvscope_observation* obs, float* scores, char* error, size_t error_size) {
  (void)error, (void)error_size;
  for (int32_t i = 0; i < obs->n_entries; ++i) scores[i] = (float)i;
  return 0;
}

static const kvscope_param_spec params[] = {
    {.name = "alpha", .kind = KVSCOPE_PARAM_FLOAT, .default_value = 5.0, .min_value = 0.0, .max_value = 1.0}};

static const kvscope_policy_plugin plugin = {.abi_version = KVSCOPE_POLICY_ABI_VERSION, .name = "out_of_range",
                                             .params = params, .n_params = 1, .score = score};

const kvscope_policy_plugin* KVSCOPE_POLICY_PLUGIN_ENTRY(void) { return &plugin; }
