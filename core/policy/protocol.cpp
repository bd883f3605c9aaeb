#include "core/policy/protocol.h"

#include <algorithm>

#include "core/common/error.h"
#include "core/policy/registry.h"

namespace kvscope::policy {

bool Protocol::evicts_in(observation::Phase phase, bool prefill_done, int step) const {
  // kvpress DecodingPress compresses after its N-th, 2N-th, ... decode forward: decode steps N - 1, 2N - 1, ...
  if (phase == observation::Phase::Decode) return decode_evict && (step + 1) % std::max(decode_interval, 1) == 0;
  return prefill_evict && (block > 0 || prefill_done);
}

bool Protocol::trims_before_output(observation::Phase phase) const {
  if (!trim_before_output) return false;
  return phase == observation::Phase::Decode ? decode_evict : block > 0;
}

std::vector<ParamSpec> protocol_params(const Protocol& defaults) {
  return {
      ParamSpec::integer("block", defaults.block, 0, 1 << 20,
                         "protocol: prompt tokens per prefill block m, evicting after every block (CAOTE §4.1: 128; "
                         "H2O Algorithm 1 evicts after every token, block=1); 0 runs the prompt in one pass, then "
                         "evicts once"),
      ParamSpec::flag("decode_evict", defaults.decode_evict,
                      "protocol: evict during decoding so every step ends at the budget (CAKE §5 runs every "
                      "method so); false appends decode tokens to the compressed prompt"),
      ParamSpec::choice("trim", defaults.trim_before_output ? "before_output" : "after_output",
                        {"after_output", "before_output"},
                        "protocol: in a step that evicts, evict after its attention output, or between scoring "
                        "and the output so the step's queries see only the kept entries (CAOTE Eq. 7). A "
                        "one-pass prefill (block=0) always evicts after its output"),
      ParamSpec::integer("decode_interval", defaults.decode_interval, 1, 1 << 20,
                         "protocol: with decode_evict, evict every N-th decode step only (steps N, 2N, ...), the "
                         "cache growing between (kvpress DecodingPress compression_interval; a budget at least the "
                         "prompt leaves the prefill uncompressed, as DecodingPress); 1: every step"),
      ParamSpec::flag("prefill_evict", defaults.prefill_evict,
                      "protocol: evict at the end of the prefill; false leaves the prompt uncompressed whatever "
                      "the budget, so that only decoding evicts (kvpress DecodingPress; needs decode_evict=true "
                      "and block=0)"),
      ParamSpec::integer("block_scoring", defaults.block_scoring, 0, 1 << 20,
                         "protocol: kvpress BlockPress(block_size=m): the prompt in one exact pass, then each layer "
                         "scored in blocks of m, each with the entries kept so far, keeping the budget's best (a "
                         "score that depends on the other entries, KeyDiff's, changes); 0: all entries at once"),
      ParamSpec::integer("decode_buffer", defaults.decode_buffer, 0, 1 << 20,
                         "protocol: with decode_evict and decode_interval N > 1, the evicting step is scored on its "
                         "own row and those of at most this many earlier decode steps since the last eviction "
                         "(kvpress DecodingPress hidden_states_buffer_size, default 256; 0: the step's own only)"),
  };
}

Protocol protocol_of(const PolicyParams& params) {
  Protocol p;
  p.block = params.get_int("block");
  p.decode_evict = params.get_bool("decode_evict");
  p.trim_before_output = params.get_choice("trim") == "before_output";
  p.decode_interval = params.has("decode_interval") ? params.get_int("decode_interval") : 1;
  p.prefill_evict = params.has("prefill_evict") ? params.get_bool("prefill_evict") : true;
  p.block_scoring = params.has("block_scoring") ? params.get_int("block_scoring") : 0;
  p.decode_buffer = params.has("decode_buffer") ? params.get_int("decode_buffer") : Protocol::kDefaultDecodeBuffer;
  if (const std::string problem = protocol_problem(p); !problem.empty()) throw UsageError(problem);
  return p;
}

std::string protocol_problem(const Protocol& p) {
  if (p.decode_interval > 1 && !p.decode_evict)
    return "decode_interval=" + std::to_string(p.decode_interval) +
           " needs decode_evict=true (it says how often decoding evicts)";
  if (p.decode_interval > 1 && p.trim_before_output)
    return "decode_interval=" + std::to_string(p.decode_interval) +
           " with trim=before_output is not supported: a decode step that does not evict has nothing to trim; use "
           "trim=after_output";
  if (!p.prefill_evict && !p.decode_evict)
    return "prefill_evict=false needs decode_evict=true (otherwise nothing is ever evicted)";
  if (!p.prefill_evict && p.block > 0)
    return "prefill_evict=false with block=" + std::to_string(p.block) +
           " is not supported: prefill blocks that never evict are one pass; use block=0";
  if (p.block_scoring > 0 && p.block > 0)
    return "block_scoring=" + std::to_string(p.block_scoring) + " scores one exact pass in blocks; with block=" +
           std::to_string(p.block) + " the prefill itself runs in blocks: use one of them";
  if (p.decode_buffer < 0)
    return "decode_buffer=" + std::to_string(p.decode_buffer) +
           " must be at least 0 (earlier decode steps whose rows an evicting step sees)";
  if (p.decode_buffer != Protocol::kDefaultDecodeBuffer && !p.decode_evict)
    return "decode_buffer=" + std::to_string(p.decode_buffer) +
           " needs decode_evict=true (it bounds the decode steps an evicting decode step is scored on)";
  if (p.block_scoring > 0 && !p.prefill_evict)
    return "block_scoring=" + std::to_string(p.block_scoring) + " scores the prefill, which prefill_evict=false does "
           "not evict";
  return "";
}

void publish_protocol(const Protocol& protocol, int budget, const std::string& source, Diagnostics& out) {
  out.set_setting("block", std::to_string(protocol.block));
  out.set_setting("decode_evict", protocol.decode_evict ? "true" : "false");
  out.set_setting("trim", protocol.trim_before_output ? "\"before_output\"" : "\"after_output\"");
  out.set_setting("decode_interval", std::to_string(protocol.decode_interval));
  out.set_setting("prefill_evict", protocol.prefill_evict ? "true" : "false");
  out.set_setting("block_scoring", std::to_string(protocol.block_scoring));
  out.set_setting("decode_buffer", std::to_string(protocol.decode_buffer));
  if (protocol.trim_before_output && protocol.block > budget)
    out.warn(source + ": prefill blocks of " + std::to_string(protocol.block) +
             " tokens are longer than the budget of " + std::to_string(budget) +
             " and trimmed before their output: at least " + std::to_string(protocol.block - budget) +
             " tokens of every block leave before any query attends to them (trim=after_output, or a smaller "
             "block, avoids that)");
}

std::string protocol_table_markdown() {
  auto cell = [](const PolicyInfo& info, const std::string& name) -> std::string {
    auto it = std::find_if(info.params.begin(), info.params.end(), [&](const ParamSpec& s) { return s.name == name; });
    return it == info.params.end() ? "fixed" : "`" + name + "`, default `" + it->default_text() + "`";
  };
  std::string out =
      "| policy | block-wise prefill | decode-time eviction | evict before the output |\n"
      "|---|---|---|---|\n";
  for (const auto& info : all_policies())
    out += "| " + info.name + " | " + cell(info, "block") + " | " + cell(info, "decode_evict") + " | " +
           cell(info, "trim") + " |\n";
  return out;
}

}  // namespace kvscope::policy
