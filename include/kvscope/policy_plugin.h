/* kvscope policy plugins: a KV-cache scorer compiled as a shared library (C, C++, Rust, Zig ...), loaded with
 * `--policy plugin:PATH.so[,name=value...]`. The only public header of kvscope: plain C, no kvscope types.
 *
 * The library exports one function, KVSCOPE_POLICY_PLUGIN_ENTRY, returning a description whose first field is
 * the ABI version it was built against. kvscope loads every version from KVSCOPE_POLICY_ABI_VERSION_MIN to its own
 * (a plugin built for version 1 runs as it did: kvscope reads its description only up to version 1's fields) and
 * refuses any other, naming both. Version 2 added what is marked "ABI 2": the hidden-states need and observation
 * fields, and the description's block_scoring. kvscope runs the
 * scorer as it runs its built-in scorers: it spreads the budget over layers, protects `sinks` and the last
 * max(`recent`, `window`) entries, and keeps the highest scores of each (layer, KV head); the protocol
 * switches block, decode_evict, trim and decode_interval and the allocation parameters apply as for H2O.
 * docs/policies.md, "Writing a policy", has the whole contract; examples/plugins/ has a plugin built by CMake.
 *
 * Threads: kvscope calls a plugin from one thread at a time per policy instance. Pointers are valid only
 * during the call. */
#ifndef KVSCOPE_POLICY_PLUGIN_H
#define KVSCOPE_POLICY_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVSCOPE_POLICY_ABI_VERSION 2u
#define KVSCOPE_POLICY_ABI_VERSION_MIN 1u /* the oldest version kvscope still loads */
#define KVSCOPE_POLICY_PLUGIN_ENTRY kvscope_get_policy_plugin
#define KVSCOPE_POLICY_PLUGIN_ENTRY_NAME "kvscope_get_policy_plugin"

/* What the scorer asks to see of each layer's attention (bit flags for `needs`). */
enum kvscope_needs {
  KVSCOPE_NEEDS_COLUMN_SUMS = 1u << 0, /* per key, attention summed over the step's queries */
  KVSCOPE_NEEDS_WINDOW_SUMS = 1u << 1, /* per key, summed over the last `window` queries */
  KVSCOPE_NEEDS_WINDOW_ROWS = 1u << 2, /* the window's probability rows */
  KVSCOPE_NEEDS_LAST_ROW = 1u << 3,    /* the last query's probability row */
  KVSCOPE_NEEDS_LOG_SUM_EXP = 1u << 4, /* per query, log sum exp of its scaled scores */
  KVSCOPE_NEEDS_QUERIES = 1u << 5,     /* the step's queries after RoPE */
  KVSCOPE_NEEDS_HIDDEN_STATES = 1u << 6 /* ABI 2: the layer's attention input after its norm (hidden_states) */
};

enum kvscope_param_kind { KVSCOPE_PARAM_INT = 0, KVSCOPE_PARAM_FLOAT = 1, KVSCOPE_PARAM_BOOL = 2 };

/* One parameter the user may set as name=value. `window`, `recent` and `sinks` are kvscope's; declaring one
 * of them sets its default. So does declaring `decode_interval` (an int, at least 1): the protocol's decode
 * interval, which this description has no field for (with decode_evict: evict at every N-th decode step only,
 * kvpress DecodingPress's compression_interval); its value reaches score() in `params` like any other's. A bool
 * named `prefill_evict` likewise sets whether the prefill evicts (0: only decoding evicts, kvpress DecodingPress),
 * and an int `decode_buffer` (at least 0) how many earlier decode steps an evicting step is scored on at most
 * (DecodingPress's hidden_states_buffer_size, default 256). */
typedef struct kvscope_param_spec {
  const char* name;
  int32_t kind; /* enum kvscope_param_kind */
  double default_value, min_value, max_value;
  const char* doc;
} kvscope_param_spec;

enum kvscope_phase { KVSCOPE_PHASE_PREFILL = 0, KVSCOPE_PHASE_DECODE = 1 };

/* One (layer, KV head) of one step, as the cache holds it now. Attention parts are NULL unless asked for in
 * `needs`; they cover the `group` query heads of this KV head (query head kv_head * group + i is part[i]). */
typedef struct kvscope_observation {
  int32_t layer, kv_head, n_layers, n_kv_heads, n_heads, group, head_dim;
  int32_t phase; /* enum kvscope_phase */
  int32_t step;  /* prefill block or decode step index */
  int32_t n_entries;
  int32_t budget; /* the layer's budget, tokens per KV head */
  int32_t prompt_length;
  const float* keys;        /* [n_entries][head_dim], after RoPE */
  const float* values;      /* [n_entries][head_dim] */
  const int32_t* positions; /* [n_entries] original token positions */
  float* state;             /* [n_entries] a per-entry accumulator that follows entries through evictions */
  int32_t n_queries, window;
  const int32_t* query_positions;   /* [n_queries] */
  const float* const* column_sums;  /* [group] -> [n_entries] */
  const float* const* window_sums;  /* [group] -> [n_entries] */
  const float* const* window_rows;  /* [group] -> [window][n_entries] */
  const float* const* last_row;     /* [group] -> [n_entries] */
  const float* const* log_sum_exp;  /* [group] -> [n_queries] */
  const float* queries;             /* [n_queries][n_heads][head_dim] */
  const double* params;             /* every declared parameter's value, in declaration order */
  /* ABI 2 (after the version-1 fields, so a version-1 plugin never sees them). With KVSCOPE_NEEDS_HIDDEN_STATES:
   * the layer's attention input after its norm, one row per query (at a decode eviction under decode_interval, the
   * buffered steps' rows; under block_scoring, BlockPress's gather: row j holds each KV head's hidden_dim /
   * n_kv_heads slice of the row of that head's j-th entry, as a Python file's obs.hidden_states). NULL otherwise. */
  int32_t hidden_dim;
  const float* hidden_states; /* [n_queries][hidden_dim] */
} kvscope_observation;

typedef struct kvscope_policy_plugin {
  uint32_t abi_version; /* KVSCOPE_POLICY_ABI_VERSION */
  const char* name;     /* shown as plugin:<name> */
  const char* summary;  /* one line */
  const kvscope_param_spec* params;
  int32_t n_params;
  uint32_t needs; /* enum kvscope_needs flags */
  /* Protocol defaults: prompt tokens per prefill block (0: one pass), evict while decoding, evict before the
   * step's output (decode_interval's and prefill_evict's defaults: parameters of those names, above). */
  int32_t block, decode_evict, trim_before_output;
  /* Fills scores[0..n_entries) (higher kept; finite). Returns 0, or non-zero after writing a message of at
   * most error_size bytes into error; the run then fails with that message. */
  int32_t (*score)(const kvscope_observation* obs, float* scores, char* error, size_t error_size);
  /* Optional (NULL: the `recent` and `sinks` parameters): how many of the last / first entries a (layer, KV
   * head) of `budget` entries keeps whatever their score, from the parameters' values. */
  int32_t (*recent)(int32_t budget, const double* params);
  int32_t (*sinks)(int32_t budget, const double* params);
  /* ABI 2 (read only from a plugin whose abi_version is 2 or more): the protocol's block_scoring default, kvpress
   * BlockPress's block size (0: every entry scored at once; a Python file's protocol {"block_scoring": m}). */
  int32_t block_scoring;
} kvscope_policy_plugin;

/* The one exported symbol. */
typedef const kvscope_policy_plugin* (*kvscope_policy_plugin_entry)(void);

#ifdef __cplusplus
}
#endif

#endif /* KVSCOPE_POLICY_PLUGIN_H */
