#pragma once
// The evaluation protocol every scorer shares, so that two methods can be compared under one protocol:
// CAOTE (§4.1) compares "base" with "base + CAOTE" under block-wise prefill, CAKE (§5) lets every method
// evict during decoding. Three switches, each a policy parameter:
//   block         prompt tokens per prefill block, evicting after each block (0: one pass, then evict once)
//   decode_evict  evict during decoding so the cache stays at its budget (false: decode tokens append)
//   trim          in a step that evicts, evict after the step's attention output (after_output) or between
//                 scoring and the output (before_output, CAOTE Eq. 7)
// and, with decode_evict, decode_interval: evict every N-th decode step only, the cache growing by one entry per
// step between (kvpress DecodingPress's compression_interval), and prefill_evict: false leaves the prefill
// uncompressed, so that only decoding evicts (kvpress DecodingPress with a target below the prompt), and
// decode_buffer: how many earlier decode steps' rows an evicting step may see at most (DecodingPress's
// hidden_states_buffer_size).
#include <string>
#include <vector>

#include "core/observation/attention_observation.h"
#include "core/policy/diagnostics.h"
#include "core/policy/params.h"

namespace kvscope::policy {

struct Protocol {
  int block = 0;
  bool decode_evict = false;
  bool trim_before_output = false;
  int decode_interval = 1;
  bool prefill_evict = true;
  int block_scoring = 0;  // kvpress BlockPress's block_size: one pass, its end scored in blocks (block_scoring.h)
  // With decode_interval > 1: the rows of at most this many earlier decode steps reach the evicting step besides
  // its own (kvpress DecodingPress's hidden_states_buffer_size; decode_row_buffer.h).
  int decode_buffer = kDefaultDecodeBuffer;
  static constexpr int kDefaultDecodeBuffer = 256;

  // Whether a policy following this protocol evicts at the end of a step of `phase` (`prefill_done`: the
  // step is the last prefill block, or a decode step; `step`: the step's index, counted from 0 in decode).
  bool evicts_in(observation::Phase phase, bool prefill_done, int step) const;
  // Whether it evicts before the output in steps of `phase`. A one-pass prefill (block 0) evicts after its
  // output: trimming first would hide the prompt from its own queries, which no paper does.
  bool trims_before_output(observation::Phase phase) const;
};

// The protocol's parameters with a policy's paper defaults (block, decode_evict, trim, decode_interval,
// prefill_evict, block_scoring, decode_buffer).
std::vector<ParamSpec> protocol_params(const Protocol& defaults);
// Throws UsageError for decode_interval > 1 without decode_evict, or with trim=before_output, and for
// prefill_evict=false without decode_evict or with block > 0, for block_scoring with block > 0 or
// prefill_evict=false, and for a decode_buffer other than the default without decode_evict.
Protocol protocol_of(const PolicyParams& params);
// What protocol_of refuses in `p` ("decode_interval=4 needs decode_evict=true ..."), or "": for the defaults a
// Python file's `protocol` or a plugin's declarations state, which its loader refuses naming the file.
std::string protocol_problem(const Protocol& p);
// The switches as effective settings of the run (block, decode_evict, trim), and a warning naming `source`
// when a block is longer than the budget and trimmed before its output: then at least block - budget of
// each block's own tokens leave before any query attends to them (CAOTE's blocks of 128 assume budgets of
// thousands).
void publish_protocol(const Protocol& protocol, int budget, const std::string& source, Diagnostics& out);

// docs/policies.md, "Protocols": one row per registered policy, one column per switch with its default, or
// "fixed" where the policy has no such parameter. Generated here so the page cannot drift from the code.
std::string protocol_table_markdown();

}  // namespace kvscope::policy
