"""Observed attention (kvpress's ObservedAttentionPress, after H2O): the attention each key receives from the
prompt's queries, divided by how many queries could see it (n - j under the causal mask), mean over the KV head's
query heads. Keeps exactly kvpress's entries at --compression-ratio R (tests/python/test_kvpress_parity.py)."""
import numpy as np

needs = ["column_sums"]


def score(obs):
    group = obs.n_heads // obs.n_kv_heads
    n = obs.n_entries
    # kvpress divides entry j's column sum by the n - j queries at or after it (arange(n, 0, -1)).
    seen_by = np.arange(n, 0, -1, dtype=np.float64)
    sums = obs.column_sums.astype(np.float64) / seen_by
    return sums.reshape(obs.n_kv_heads, group, n).mean(axis=1)
