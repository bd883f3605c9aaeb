"""Not a policy: torch's CPU random generator replayed in numpy, for the ports of kvpress presses that draw from it
(random_press.py, leverage.py, compactor.py), so that a seeded torch draw is reproduced.

torch's CPU generator is MT19937 seeded as numpy's legacy seeding seeds it (init_genrand); a float32 uniform is
the low 24 bits of one 32-bit output times 2^-24, in tensor order (torch.rand); torch.randn of a tensor of at
least 16 values turns every 16 such uniforms u into normals by Box-Muller, the first 8 as
sqrt(-2 ln(1 - u[j])) cos(2 pi u[j+8]), the last 8 with sin. Uniforms come out bit-exact; normals within ~1e-6
(torch computes them in float32 with vectorised log/cos)."""
import numpy as np


def outputs(seed, count):
    """The first `count` 32-bit outputs after torch.manual_seed(seed) (or a torch.Generator seeded so)."""
    bits = np.random.MT19937(0)
    bits._legacy_seeding(seed)
    return bits.random_raw(count)


def rand32(seed, count):
    """torch.rand(count) in float32 after seeding, as float64 (exact)."""
    return (outputs(seed, count) & 0xFFFFFF).astype(np.float64) * 2.0 ** -24


def randn32(seed, count):
    """The first `count` (a multiple of 16) values of torch.randn(...) in float32 after seeding, as float32."""
    u = rand32(seed, count).reshape(-1, 16)
    radius = np.sqrt(-2.0 * np.log(1.0 - u[:, :8]))
    angle = 2.0 * np.pi * u[:, 8:]
    return np.concatenate([radius * np.cos(angle), radius * np.sin(angle)], axis=1).reshape(-1).astype(np.float32)
