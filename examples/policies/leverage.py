"""Leverage scores (kvpress's LeverageScorePress, from Compactor, Chari & Van Durme 2025): how much of an outlier
each token's key is, as its statistical leverage among the prompt's centred keys before RoPE, through a Gaussian
sketch of `sketch_dimension` columns, with kvpress's Cholesky jitter (1e-2); z-normalised over the layer. kvpress
draws the sketch from torch's global generator; this file replays that generator in numpy as if
torch.manual_seed(seed) ran just before the prefill (layer l's sketch is the l-th block of draws;
_torch_cpu_rng.py) and applies it in transformers' head-dimension order, so with the same seed it keeps
kvpress's entries at --compression-ratio R (tests/python/test_kvpress_parity.py). A sketch of 0 columns uses
none: the exact leverage. Prefill only."""
import importlib.util
import os

import numpy as np

needs = ["hidden_states", "k_proj"]
params = {
    "sketch_dimension": (48, 0, 1 << 16, "columns of the Gaussian sketch (0: exact, unsketched)"),
    "seed": (0, 0, 2147483647, "torch.manual_seed given before the prefill, whose draws this replays"),
}
JITTER = 1e-2  # kvpress's first Cholesky try adds 1e-2 I to the Gram matrix

_draws = {}


def _sibling(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(__file__), name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_rng = _sibling("_torch_cpu_rng")


def sketch(seed, layer, heads, d, k):
    """kvpress's (heads, d, k) sketch of `layer`: torch.randn(1, heads, d, k) / sqrt(k), one call per layer."""
    block = heads * d * k
    count = -(-(layer + 1) * block // 16) * 16
    if _draws.get("seed") != seed or len(_draws["values"]) < count:  # drawn once for a run's layers
        _draws.update(seed=seed, values=_rng.randn32(seed, max(count, -(-32 * block // 16) * 16)))
    draws = _draws["values"]
    phi = draws[layer * block:(layer + 1) * block].reshape(heads, d, k)
    return phi.astype(np.float64) * np.float64(np.float32(1 / np.sqrt(k)))


def pre_rope_keys(obs, hidden_states):
    """(n_kv_heads, n, head_dim), float64: the layer's input projected by k_proj (as kvpress recomputes them), head
    dimensions in transformers' rotate-half order, the order kvpress's sketch multiplies: the sketch mixes
    dimensions, so unlike a norm or a dot product the leverage depends on their order. A llama GGUF stores pair i
    as dimensions (2i, 2i+1) (docs/policies.md), transformers as (i, i + rope_dim/2)."""
    h = np.asarray(hidden_states, dtype=np.float64)
    w = obs.k_proj.reshape(obs.n_kv_heads, obs.head_dim, -1)
    if obs.rope.pairing == "adjacent":  # the weight's rows reordered, not the product's columns (cheaper)
        r = obs.rope.rope_dim
        w = w[:, np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2), np.arange(r, obs.head_dim)])]
    k = h @ w.reshape(-1, w.shape[-1]).astype(np.float64).T
    # (n, heads x d) -> (heads, n, d), contiguous: the centring and the sketch then run on whole rows
    return np.ascontiguousarray(k.reshape(len(h), obs.n_kv_heads, -1).transpose(1, 0, 2))


def leverage(keys, phi):
    """keys (H, n, d), phi (H, d, k) or None -> (H, n): the leverage of each centred (sketched) row,
    diag(X (X^T X + jitter I)^-1 X^T), clamped at 0."""
    x = keys - keys.mean(axis=1, keepdims=True)
    if phi is not None:
        x = x @ phi
    g = x.transpose(0, 2, 1) @ x  # a BLAS product (einsum loops in C, 10x slower here)
    g = 0.5 * (g + g.transpose(0, 2, 1)) + JITTER * np.eye(g.shape[-1])
    solved = np.linalg.solve(g, x.transpose(0, 2, 1))
    return np.maximum((x * solved.transpose(0, 2, 1)).sum(axis=-1), 0.0)


def zscore(s):
    """Over the whole layer (all heads), with the unbiased standard deviation, as kvpress normalises."""
    return (s - s.mean()) / max(s.std(ddof=1), 1e-6)


def layer_scores(obs, hidden_states, k):
    keys = pre_rope_keys(obs, hidden_states)
    phi = sketch(obs.params["seed"], obs.layer, obs.n_kv_heads, obs.head_dim, k) if k > 0 else None
    return zscore(leverage(keys, phi))


def score(obs):
    return layer_scores(obs, obs.hidden_states, obs.params["sketch_dimension"])
