"""Non-causal chunked attention (kvpress's NonCausalAttnPress, from Compactor, Chari & Van Durme 2025): within
chunks of `chunk_size` prompt tokens every query attends to every key of its chunk (no causal mask, no
1/sqrt(d) scaling; the last chunk zero-padded as kvpress pads it), a key's score is the attention its chunk's
queries pay it, averaged over the KV head's query heads, times |v|, smoothed by a 3-wide average and
z-normalised. Prefill only. Keeps kvpress's entries at --compression-ratio R (tests/python/test_kvpress_parity.py).
The built-in `non_causal_attn` is its C++ twin (the same entries, faster; docs/policies.md)."""
import numpy as np

needs = ["hidden_states", "q_proj"]
params = {"chunk_size": (256, 1, 1 << 20, "tokens per chunk")}


def column_sums(q, k, chunk):
    """q (K, G, S, d), k (K, S, d) -> (K, G, S): per key, softmax attention summed over the queries of its chunk
    (the G query heads of KV head K share its keys). The last chunk is as if padded to `chunk` with zero queries and
    zero keys whose logits are set to -1e-9 (kvpress's masking, which leaves padded keys in the softmax and padded
    queries attending): a padded key adds exp(-1e-9 - max) to each row's sum, and each padded query gives every
    real key 1 / (n + pad exp(-1e-9)). One chunk at a time (its logits stay in cache), by batched matrix products
    (BLAS), the column sums as (1 / row sums) @ exp."""
    K, G, S, d = q.shape
    out = np.empty((K, G, S))
    for first in range(0, S, chunk):
        n = min(chunk, S - first)
        pad = chunk - n
        dots = q[:, :, first:first + n] @ k[:, None, first:first + n].swapaxes(-1, -2)  # (K, G, queries, keys)
        top = dots.max(axis=-1, keepdims=True)
        if pad:
            np.maximum(top, -1e-9, out=top)
        dots -= top
        np.exp(dots, out=dots)
        total = dots.sum(axis=-1)
        if pad:
            total += pad * np.exp(-1e-9 - top[..., 0])
        sums = ((1.0 / total)[..., None, :] @ dots)[..., 0, :]
        if pad:
            sums += pad / (n + pad * np.exp(-1e-9))
        out[:, :, first:first + n] = sums
    return out


def scores(obs, hidden_states, positions, keys, values, chunk):
    """The z-scores of the tokens whose layer inputs, positions, keys and values are given (a slice of the
    prompt for Compactor): queries projected by q_proj and rotated to their positions."""
    n, d = len(hidden_states), obs.head_dim
    group = obs.n_heads // obs.n_kv_heads
    q = (np.asarray(hidden_states, dtype=np.float64) @ obs.q_proj.astype(np.float64).T).astype(np.float32)
    q = q.reshape(n, obs.n_heads, d)
    q = np.asarray(obs.rope.rotate(q, np.broadcast_to(positions[:, None], (n, obs.n_heads))),
                   dtype=np.float64).transpose(1, 0, 2).reshape(obs.n_kv_heads, group, n, d)
    a = column_sums(q, keys.astype(np.float64), chunk).mean(axis=1)
    s = a * np.linalg.norm(values.astype(np.float64), axis=-1)
    padded = np.pad(s, ((0, 0), (1, 1)))
    s = (padded[:, :-2] + padded[:, 1:-1] + padded[:, 2:]) / 3
    return (s - s.mean()) / max(s.std(ddof=1), 1e-6)


def score(obs):
    return scores(obs, obs.hidden_states, obs.query_positions, obs.keys, obs.values, obs.params["chunk_size"])
