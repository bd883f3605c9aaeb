"""Random (kvpress's RandomPress, seeded): uniform random scores, a baseline. Like kvpress, each layer draws
torch.rand(1, n_kv_heads, n) from a torch generator seeded with `seed` (so every layer keeps the same positions);
this file replays torch's CPU generator in numpy (_torch_cpu_rng.py), bit-exact, so with the same seed it keeps
kvpress's entries at --compression-ratio R (tests/python/test_kvpress_parity.py)."""
import importlib.util
import os

spec = importlib.util.spec_from_file_location("_torch_cpu_rng", os.path.join(os.path.dirname(__file__),
                                                                            "_torch_cpu_rng.py"))
_rng = importlib.util.module_from_spec(spec)
spec.loader.exec_module(_rng)

params = {"seed": (0, 0, 2147483647, "seed of the torch generator, re-seeded for every layer (as kvpress does)")}


def score(obs):
    return _rng.rand32(obs.params["seed"], obs.n_kv_heads * obs.n_entries).reshape(obs.n_kv_heads, obs.n_entries)
