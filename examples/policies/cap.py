"""CAPKV (kvpress's CapPress, arXiv 2604.25975): a key's retention score is its query relevance times the leverage
of its value in a capacity matrix, s_j = w_j v_j^T A^-1 v_j with A = I + sum_i w_i v_i v_i^T and
w_j = exp(tau cos(k_j, mu_q) - max), mu_q the mean of the prompt's queries after the first `n_sink` (projected from
the layer's input, before RoPE, rotated by RoPE averaged over the next `n_future_positions` positions, as
ExpectedAttention's); averaged over the KV head's query heads; the sinks are always kept. Works in the model
file's head-dimension order (a cosine and the averaged rotation built with obs.rope do not depend on it). Keeps
kvpress's entries at --compression-ratio R (tests/python/test_kvpress_parity.py)."""
import numpy as np

needs = ["hidden_states", "q_proj"]
params = {
    "tau": (5.0, 0.0, 1e6, "temperature of the query-key alignment weights"),
    "n_future_positions": (512, 1, 1 << 20, "future query positions the RoPE rotation is averaged over"),
    "n_sink": (4, 0, 1 << 20, "first tokens always kept, and left out of the query anchor"),
    "epsilon": (1e-6, 0.0, 1e6, "added to the weights before their square root scales the values"),
}

_averaged_rotations = {}
_q_proj64 = {}  # layer -> (the run's obs.q_proj, it in float64)


def q_proj64(obs):
    cached = _q_proj64.get(obs.layer)
    if cached is None or cached[0] is not obs.q_proj:
        cached = _q_proj64[obs.layer] = (obs.q_proj, obs.q_proj.astype(np.float64))
    return cached[1]


def averaged_rotation(rope, start, count):
    """M with x @ M = mean over p in [start, start + count) of x rotated to position p (rows in the model's order)."""
    key = (start, count)
    if key not in _averaged_rotations:
        d = rope.head_dim
        eye = np.broadcast_to(np.eye(d, dtype=np.float32), (count, d, d))
        pos = np.broadcast_to(np.arange(start, start + count, dtype=np.int32)[:, None], (count, d))
        _averaged_rotations.clear()
        _averaged_rotations[key] = np.asarray(rope.rotate(eye, pos), dtype=np.float64).mean(axis=0)
    return _averaged_rotations[key]


def unit(x):
    # torch's F.normalize: x / max(|x|, 1e-12)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def score(obs):
    p = obs.params
    n, d, sink = obs.n_entries, obs.head_dim, p["n_sink"]
    if n <= sink:
        raise ValueError(f"CapPress needs more entries ({n}) than n_sink={sink}")
    group = obs.n_heads // obs.n_kv_heads
    h = obs.hidden_states[sink:].astype(np.float64)
    q = (h @ q_proj64(obs).T).reshape(len(h), obs.n_heads, d).transpose(1, 0, 2)  # (n_heads, m, d) before RoPE
    # kvpress averages RoPE over the positions after its query count (the prompt's length in one pass)
    anchor = (q @ averaged_rotation(obs.rope, len(obs.hidden_states), p["n_future_positions"])).mean(axis=1)
    anchor = unit(anchor).reshape(obs.n_kv_heads, group, 1, d)
    k = unit(obs.keys[:, None, sink:].astype(np.float64))  # (n_kv, 1, n - sink, d), shared by the group
    v = obs.values[:, None, sink:].astype(np.float64)
    stat = np.clip((k * anchor).sum(axis=-1), -1.0, 1.0)  # (n_kv, group, n - sink)
    logits = p["tau"] * stat
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    scaled = v * np.sqrt(w + p["epsilon"])[..., None]
    capacity = np.eye(d) + scaled.transpose(0, 1, 3, 2) @ scaled  # (n_kv, group, d, d)
    vt = np.broadcast_to(v.transpose(0, 1, 3, 2), capacity.shape[:2] + (d, n - sink))
    leverage = (vt * np.linalg.solve(capacity, vt)).sum(axis=-2)
    s = (w * leverage).mean(axis=1)  # (n_kv, n - sink)
    return np.concatenate([np.full((obs.n_kv_heads, sink), s.max() + 1), s], axis=1)
