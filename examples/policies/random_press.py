"""Random (kvpress's RandomPress, seeded): uniform random scores, a baseline. Like kvpress, the generator is
re-seeded with `seed` at every call, so every layer keeps the same positions; numpy's draws are not torch's, so
the kept positions are not kvpress's, only their number and that pattern (tests/python/test_kvpress_parity.py)."""
import numpy as np

params = {"seed": (0, 0, 2147483647, "seed of the generator, re-seeded for every layer (as kvpress does)")}


def score(obs):
    return np.random.default_rng(obs.params["seed"]).random((obs.n_kv_heads, obs.n_entries))
