"""CUR (kvpress's CURPress, after CurDKV, Sengupta et al. 2025): approximate leverage of each token's key and
value, |k|^2 and |v|^2 normalised within windows of `local_window_size` tokens, combined by `leverage_type`
(product by default) and normalised over the prompt; the first `num_sinks` tokens are always kept. kvpress's
use_random_leverage (an unseeded torch projection) is not offered. Keeps exactly kvpress's entries at
--compression-ratio R (tests/python/test_kvpress_parity.py)."""
import numpy as np

params = {
    "num_sinks": (4, 0, 1 << 20, "first tokens always kept"),
    "leverage_type": {"default": "kv_product", "choices": ["key", "value", "kv_avg", "kv_product"],
                      "doc": "how key and value leverage combine"},
    "use_local_approximation": {"default": True, "doc": "normalise the leverages within windows"},
    "local_window_size": (16, 1, 1 << 20, "window of the local normalisation"),
}


def local(x, w):
    """Each value divided by the sum of its window of w (the last window zero-padded)."""
    heads, n = x.shape
    padded = np.pad(x, ((0, 0), (0, (w - n % w) % w))).reshape(heads, -1, w)
    return (padded / padded.sum(axis=-1, keepdims=True)).reshape(heads, -1)[:, :n]


def score(obs):
    p = obs.params
    k2 = (obs.keys.astype(np.float64) ** 2).sum(axis=-1)
    v2 = (obs.values.astype(np.float64) ** 2).sum(axis=-1)
    if p["use_local_approximation"]:
        k2, v2 = local(k2, p["local_window_size"]), local(v2, p["local_window_size"])
    s = {"key": k2, "value": v2, "kv_avg": (k2 + v2) / 2, "kv_product": k2 * v2}[p["leverage_type"]]
    s = s / s.sum(axis=-1, keepdims=True)
    s[:, :p["num_sinks"]] = 1.0
    return s
