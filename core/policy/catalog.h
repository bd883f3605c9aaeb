#pragma once
// One function per policy file, returning its registry entry. registry.cpp lists them all; a policy file
// that is not listed there is not reachable by name.
#include "core/policy/registry.h"

namespace kvscope::policy {

PolicyInfo full_policy_info();
PolicyInfo streaming_llm_policy_info();
PolicyInfo local_window_policy_info();  // streaming_llm.cpp: StreamingLLM without sinks
PolicyInfo h2o_policy_info();
PolicyInfo tova_policy_info();
PolicyInfo snapkv_policy_info();
PolicyInfo pyramidkv_policy_info();
PolicyInfo d2o_policy_info();
PolicyInfo dynamickv_policy_info();
PolicyInfo caote_policy_info();
PolicyInfo kvmerger_policy_info();
PolicyInfo cake_policy_info();
PolicyInfo cam_policy_info();
PolicyInfo expected_attention_policy_info();  // kvpress ports, scored in float64 from the layer's input
PolicyInfo non_causal_attn_policy_info();
PolicyInfo compactor_policy_info();

}  // namespace kvscope::policy
