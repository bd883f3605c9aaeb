"""Expected attention (kvpress's ExpectedAttentionPress, Devoto et al. 2025): the attention that future queries
are expected to pay each key. The prompt's queries after the first `n_sink` (projected from the layer's input,
before RoPE) give a mean and covariance per query head, rotated by RoPE averaged over the next
`n_future_positions` positions; a key scores softmax_j(k_j.mu / sqrt(d) + k_j^T cov k_j / (2d)), averaged over the
KV head's query heads, times |v_j| (plus `epsilon`) with use_vnorm; the sinks are always kept. Works in the model
file's head-dimension order (the averaged rotation is built with obs.rope, so it holds for either pairing and any
RoPE scaling). Keeps kvpress's entries at --compression-ratio R (tests/python/test_kvpress_parity.py).
The built-in `expected_attention` is its C++ twin (the same entries, faster; docs/policies.md)."""
import numpy as np

needs = ["hidden_states", "q_proj"]
params = {
    "n_future_positions": (512, 1, 1 << 20, "future query positions the RoPE rotation is averaged over"),
    "n_sink": (4, 0, 1 << 20, "first tokens always kept, and left out of the query statistics"),
    "use_covariance": {"default": True, "doc": "add the queries' covariance term"},
    "use_vnorm": {"default": True, "doc": "multiply by the value's norm"},
    "epsilon": (0.0, 0.0, 1e6, "added to the expected attention before the value-norm rescaling"),
}

_averaged_rotations = {}
_q_proj64 = {}  # layer -> (the run's obs.q_proj, it in float64): decoding calls score() per step


def q_proj64(obs):
    cached = _q_proj64.get(obs.layer)
    if cached is None or cached[0] is not obs.q_proj:
        cached = _q_proj64[obs.layer] = (obs.q_proj, obs.q_proj.astype(np.float64))
    return cached[1]


def averaged_rotation(rope, start, count):
    """M with x @ M = mean over p in [start, start + count) of x rotated to position p (x a row in the model's
    head-dimension order): M = mean_p R_p^T, built by rotating the identity's rows."""
    key = (start, count)
    if key not in _averaged_rotations:
        d = rope.head_dim
        eye = np.broadcast_to(np.eye(d, dtype=np.float32), (count, d, d))
        pos = np.broadcast_to(np.arange(start, start + count, dtype=np.int32)[:, None], (count, d))
        _averaged_rotations.clear()
        _averaged_rotations[key] = np.asarray(rope.rotate(eye, pos), dtype=np.float64).mean(axis=0)
    return _averaged_rotations[key]


def score(obs):
    p = obs.params
    n, d, sink = obs.n_entries, obs.head_dim, min(p["n_sink"], obs.n_entries)
    group = obs.n_heads // obs.n_kv_heads
    # the queries of tokens n_sink.. before RoPE: (n_heads, m, d)
    h = obs.hidden_states[sink:].astype(np.float64)
    q = (h @ q_proj64(obs).T).reshape(len(h), obs.n_heads, d).transpose(1, 0, 2)
    mu = q.mean(axis=1)
    # kvpress averages RoPE over the positions after its query count: the prompt's length in a one-pass prefill,
    # the buffered decode steps' count under DecodingPress (decode_interval), the scored entries' under BlockPress
    m = averaged_rotation(obs.rope, len(obs.hidden_states), p["n_future_positions"])
    mu = mu @ m
    k = obs.keys[:, None, sink:].astype(np.float64)  # (n_kv, 1, n - sink, d), shared by the group's query heads
    mu = mu.reshape(obs.n_kv_heads, group, d)
    s = (k @ mu[..., None])[..., 0] / np.sqrt(d)  # (n_kv, group, n - sink)
    if p["use_covariance"] and len(h) > 1:  # one query (a decode step's): its covariance, and the term, are 0
        c = q - q.mean(axis=1, keepdims=True)
        cov = c.transpose(0, 2, 1) @ c / len(h)
        cov = (m.T @ cov @ m).reshape(obs.n_kv_heads, group, d, d)  # R cov R^T in row form
        s += ((k @ cov) * k).sum(axis=-1) / d / 2
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    s /= s.sum(axis=-1, keepdims=True)
    s = s.mean(axis=1)
    if p["use_vnorm"]:
        s = (s + p["epsilon"]) * np.linalg.norm(obs.values[:, sink:].astype(np.float64), axis=-1)
    return np.concatenate([np.full((obs.n_kv_heads, sink), s.max() + 1), s], axis=1)
