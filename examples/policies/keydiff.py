"""KeyDiff (kvpress's KeyDiffPress, Park et al. 2025): keep the keys least similar to the mean direction of the
head's keys, score = -cos(k_j, mean_i k_i / |k_i|). Keeps exactly kvpress's entries at --compression-ratio R
(tests/python/test_kvpress_parity.py); the paper's block-wise form is this file with block=N."""
import numpy as np


def score(obs):
    k = obs.keys.astype(np.float64)  # (n_kv_heads, n, head_dim)
    norms = np.linalg.norm(k, axis=-1, keepdims=True)
    # torch's F.normalize divides by max(|k|, 1e-12); cosine_similarity by max(|a| |b|, 1e-8).
    anchor = (k / np.maximum(norms, 1e-12)).mean(axis=1, keepdims=True)
    cos = (k * anchor).sum(axis=-1) / np.maximum(norms[..., 0] * np.linalg.norm(anchor, axis=-1), 1e-8)
    return -cos
