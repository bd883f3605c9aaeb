"""LagKV (kvpress's LagKVPress, Liang et al. 2025): the prompt after `n_sink` tokens is cut into partitions of
`lag_size`; each partition's keys and values are min-max normalised by the next partition's range, and a token's
score is the softmax (over its partition) of the standard deviation of its normalised key, averaged with its
value's; tokens are ranked within their partition. The sinks and the last partition (with the remainder) are
always kept. A prompt shorter than n_sink + 2 lag_size keeps the sinks, then the most recent tokens. Keeps
exactly kvpress's entries at --compression-ratio R except among equal ranks of different partitions, which
kvpress orders as torch.topk does and kvscope by position (tests/python/test_kvpress_parity.py)."""
import numpy as np

params = {
    "n_sink": (4, 0, 1 << 20, "first tokens always kept"),
    "lag_size": (128, 1, 1 << 20, "tokens per partition"),
    "cross_scoring": {"default": False, "doc": "score with the softmax values instead of per-partition ranks"},
}


def partition_scores(x, lag):
    """x: (n_parts, lag, d) -> (n_parts - 1, lag): softmax over each partition of the std (ddof 1) of its rows
    min-max normalised by the next partition's per-dimension range."""
    ref = x[1:]
    lo, hi = ref.min(axis=1, keepdims=True), ref.max(axis=1, keepdims=True)
    spread = ((x[:-1] - lo) / (hi - lo)).std(axis=-1, ddof=1)
    e = np.exp(spread - spread.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def score(obs):
    n_sink, lag = obs.params["n_sink"], obs.params["lag_size"]
    heads, n = obs.n_kv_heads, obs.n_entries
    if n < n_sink + 2 * lag:
        s = np.ones((heads, n))
        if n > n_sink:
            s[:, n_sink:] = np.arange(n - n_sink) / (n - n_sink)
        return s
    end = n_sink + ((n - n_sink) // lag) * lag
    parts = (end - n_sink) // lag
    s = np.ones((heads, n))
    for h in range(heads):
        k = obs.keys[h, n_sink:end].astype(np.float64).reshape(parts, lag, -1)
        v = obs.values[h, n_sink:end].astype(np.float64).reshape(parts, lag, -1)
        sc = (partition_scores(k, lag) + partition_scores(v, lag)) / 2
        if not obs.params["cross_scoring"]:
            sc = np.argsort(np.argsort(sc, axis=-1, kind="stable"), axis=-1, kind="stable") / lag
        s[h, n_sink:end - lag] = sc.reshape(-1)
    return s
