"""Compactor (kvpress's CompactorPress, Chari & Van Durme 2025): between `sink_size_start` first and
`sink_size_end` last tokens (always kept), a token scores blending x its leverage z-score (leverage.py, the same
replay of torch's sketch with `seed`) plus its non-causal chunked attention z-score (non_causal_attn.py), both
over the tokens between the sinks. kvpress blends with the compression ratio, which a policy is not told: give
blending=R with --compression-ratio R (the default -1 takes 1 - budget / prompt_length, which is R only up to
kvpress's truncation). Prefill only. Keeps kvpress's entries (tests/python/test_kvpress_parity.py).
The built-in `compactor` is its C++ twin (the same entries, faster; docs/policies.md)."""
import importlib.util
import os

import numpy as np


def _sibling(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(__file__), name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_leverage = _sibling("leverage")
_non_causal = _sibling("non_causal_attn")

needs = ["hidden_states", "q_proj", "k_proj"]
params = {
    "sink_size_start": (8, 0, 1 << 20, "first tokens always kept"),
    "sink_size_end": (4, 0, 1 << 20, "last tokens always kept"),
    "chunk_size": (256, 1, 1 << 20, "tokens per chunk of the non-causal attention"),
    "sketch_dimension": (48, 0, 1 << 16, "columns of the leverage's Gaussian sketch (0: exact)"),
    "seed": (0, 0, 2147483647, "torch.manual_seed given before the prefill, whose draws the sketch replays"),
    "blending": (-1.0, -1.0, 1e6, "weight of the leverage scores; -1: 1 - budget / prompt_length"),
}


def score(obs):
    p = obs.params
    n = obs.n_entries
    left = min(p["sink_size_start"], n)
    right = min(p["sink_size_end"], max(0, n - left))
    mid = slice(left, n - right)
    hidden = obs.hidden_states[mid].astype(np.float64)  # read and widened once: both parts project it
    lev = _leverage.layer_scores(obs, hidden, p["sketch_dimension"])
    attn = _non_causal.scores(obs, hidden, obs.query_positions[mid], obs.keys[:, mid], obs.values[:, mid],
                              p["chunk_size"])
    blending = p["blending"] if p["blending"] >= 0 else 1 - obs.budget / obs.prompt_length
    s = blending * lev + attn
    return np.concatenate([np.full((obs.n_kv_heads, left), s.max()), s,
                           np.full((obs.n_kv_heads, right), s.max())], axis=1)
