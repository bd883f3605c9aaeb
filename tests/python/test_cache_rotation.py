"""The Hadamard rotation of the quantized KV cache (`--cache-rotation hadamard`, docs/quantized_cache.md "Against
llama.cpp at q4_0 and q4_1"), against numpy:

- the default model's real key and value rows at the end of a prefill (heat_pump.txt, a float32 cache), stored by
  kvscope's cache at q4_0, q4_1 and q8_0 with the rotation (tests/support/kv_block_tool.cpp): the stored blocks
  equal gguf.quants' quantization of the rotated rows H x byte for byte, with H the normalised Sylvester Hadamard
  matrix built here by its recursion (blocks of 64 for this model's head_dim 64), the rows read back equal H
  applied to gguf's dequantization, and the storage error (relative NMSE, mean over the layers) the cache records
  equals numpy's, measured after rotating back, and is below the unrotated cache's;
- a Python policy's obs.keys and obs.values: at f32 with the rotation they equal the unrotated run's (the model's
  frame); at q4_0 with the rotation layer 0's equal numpy's H dequantize(quantize(H x)) of the float32 rows;
- a trace at q4_0 with `--cache-rotation hadamard` records layer 0's storage error as numpy computes it.

Without the rotation the stored bytes differ; without the back-rotation obs.keys are the rotated rows.
"""
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from checks import FAILURES, check, passed

BINARY = os.environ.get("KVSCOPE_BINARY", "")
TOOL = os.environ.get("KVSCOPE_KV_BLOCK_TOOL", "")
ROOT = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PROMPT = os.path.join(ROOT, "sample_data", "prompts", "heat_pump.txt")
TYPES = {"q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0, "q4_1": GGMLQuantizationType.Q4_1}
BYTES_PER_BLOCK = {"q8_0": 34, "q4_0": 18, "q4_1": 20}
# Measured 2026-11-28 (docs/quantized_cache.md): the mean over the 30 layers of the relative NMSE of heat_pump's
# rows, rotated (H/8) and as stored. The checks below compare with numpy exactly; these only catch a different
# prompt or model.
DOCUMENTED = {("q4_0", "keys"): (6.7e-3, 1.62e-2), ("q4_0", "values"): (7.2e-3, 9.9e-3),
              ("q4_1", "keys"): (5.8e-3, 9.4e-3), ("q4_1", "values"): (6.0e-3, 7.2e-3),
              ("q8_0", "keys"): (2.6e-5, 6.4e-5), ("q8_0", "values"): (2.8e-5, 3.9e-5)}
# f32 with the rotation against f32 without: rounding of the rotation itself (about 1e-7 of a value) carried
# through 30 layers. Measured 7.0e-6 of the largest value (2026-11-28); a missing back-rotation moves them by ~1.
FRAME_TOLERANCE = 1e-4


def sylvester(n):
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def rotate(rows, block):
    """Each row's consecutive blocks of `block` values times H (symmetric, so also the inverse), in float64."""
    n, d = rows.shape
    return (rows.astype(np.float64).reshape(n, d // block, block) @ sylvester(block)).reshape(n, d)


def rotate32(rows, block):
    """The same product in float32 as a butterfly (x_j, x_j+h) -> (x_j + x_j+h, x_j - x_j+h) for h = 1, 2, 4, ...,
    then times 1/sqrt(block): how a float32 cache computes it. Its roundings decide which code a value near a
    code boundary gets, so the byte comparison needs them; rotate() checks that it is the matrix product."""
    n, d = rows.shape
    x = rows.astype(np.float32).reshape(n * d // block, block)
    half = 1
    while half < block:
        pairs = x.reshape(x.shape[0], block // (2 * half), 2, half)
        a, c = pairs[:, :, 0, :], pairs[:, :, 1, :]
        x = np.stack([a + c, a - c], axis=2).reshape(x.shape[0], block)
        half *= 2
    return (x * np.float32(1.0 / np.sqrt(block))).reshape(n, d)


def numpy_store(rows, type_name, block):
    """(blocks as gguf stores H x, the rows rotated back from gguf's dequantization)."""
    stored = quantize(rotate32(rows, block), TYPES[type_name])
    back = rotate32(dequantize(stored, TYPES[type_name]).reshape(rows.shape), block)
    return stored.view(np.uint8).reshape(rows.shape[0], -1), back


def nmse(x, y):
    return float(((x.astype(np.float64) - y) ** 2).sum() / (x.astype(np.float64) ** 2).sum())


def tool_store(spec, rows):
    n, d = rows.shape
    res = subprocess.run([TOOL, "quantize", spec, str(d)], input=np.ascontiguousarray(rows, np.float32).tobytes(),
                         capture_output=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"kv_block_tool quantize {spec} failed: {res.stderr.decode()[-500:]}")
    row_bytes = len(res.stdout) // n - 4 * d
    stored = np.frombuffer(res.stdout[: n * row_bytes], np.uint8).reshape(n, row_bytes)
    back = np.frombuffer(res.stdout[n * row_bytes:], np.float32).reshape(n, d)
    return stored, back, json.loads(res.stderr.decode().strip().splitlines()[-1])


def real_rows(folder):
    """[layers][kv_heads][keys, values][entries][head_dim] of the default model after heat_pump's prefill."""
    out = os.path.join(folder, "rows.f32")
    with open(PROMPT) as f:
        prompt = f.read()
    res = subprocess.run([TOOL, "rows", out, prompt], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        print(f"the default model is needed: {res.stderr.strip()[-300:]}")
        return None
    s = json.loads(res.stdout)
    return np.fromfile(out, np.float32).reshape(s["layers"], s["kv_heads"], 2, s["entries"], s["head_dim"])


def check_storage(rows):
    layers, heads, _, n, d = rows.shape
    block = 64  # head_dim 64: keys and values both in one block of 64
    x = rows.reshape(-1, d)
    gap = float(np.abs(rotate32(x, block) - rotate(x, block)).max() / np.abs(x).max())
    check(gap <= 1e-6, f"the float32 butterfly is H x, H the Sylvester matrix (relative difference {gap:.1e})")
    for type_name in TYPES:
        for p, part in enumerate(("keys", "values")):
            x = rows[:, :, p].reshape(-1, d)
            stored, back, recorded = tool_store(f"{type_name}:rot=hadamard", x)
            expected_blocks, expected_back = numpy_store(x, type_name, block)
            # The rotated cache stores exactly gguf's blocks of the rows H x.
            differ = stored != expected_blocks
            check(not differ.any(), f"{type_name} {part}: the stored blocks are gguf's quantization of H x "
                                    f"({int(differ.sum())} of {stored.size} bytes differ)")
            own_back = rotate32(dequantize(stored, TYPES[type_name]).reshape(x.shape), block)
            gap = float(np.abs(back - own_back).max())
            check(gap <= 1e-5 * float(np.abs(own_back).max()),
                  f"{type_name} {part}: the rows read back are H dequantize(stored blocks) (max difference {gap:.2e})")
            per_layer = x.reshape(layers, heads * n, d)
            ours = np.mean([nmse(a, b) for a, b in zip(per_layer, back.reshape(layers, heads * n, d))])
            theirs = np.mean([nmse(a, b) for a, b in zip(per_layer, expected_back.reshape(layers, heads * n, d))])
            plain = np.mean([nmse(a, dequantize(quantize(a, TYPES[type_name]), TYPES[type_name]).reshape(a.shape))
                             for a in per_layer])
            check(abs(ours - theirs) <= 1e-4 * theirs, f"{type_name} {part}: NMSE {ours:.4e} equals numpy's {theirs:.4e}")
            check(abs(recorded[f"{part}_nmse"] - nmse(x, expected_back)) <= 1e-4 * nmse(x, expected_back),
                  f"{type_name} {part}: the cache's recorded storage error {recorded[f'{part}_nmse']:.4e} equals numpy's "
                  f"{nmse(x, expected_back):.4e}")
            rotated_doc, plain_doc = DOCUMENTED[(type_name, part)]
            print(f"{type_name} {part}: NMSE mean over layers {plain:.3e} as stored, {ours:.3e} rotated "
                  f"({plain / ours:.2f}x less; documented {plain_doc:.2e} -> {rotated_doc:.2e})")
            check(abs(ours - rotated_doc) <= 0.1 * rotated_doc and abs(plain - plain_doc) <= 0.1 * plain_doc,
                  f"{type_name} {part}: {plain:.3e} -> {ours:.3e} as documented ({plain_doc:.2e} -> {rotated_doc:.2e})")
            check(ours < plain, f"{type_name} {part}: the rotation lowers the storage error")
    # Unrotated, the bytes are gguf's of x itself, not of H x: the check above would fail without the rotation.
    stored, _, _ = tool_store("q4_0", rows[:, :, 0].reshape(-1, d))
    check(not (stored == numpy_store(rows[:, :, 0].reshape(-1, d), "q4_0", block)[0]).all(),
          "without the rotation the stored blocks differ from H x's")


DUMP_POLICY = '''import numpy as np
OUT = {out!r}


def score(obs):
    if obs.phase == "prefill":
        np.save(f"{{OUT}}_L{{obs.layer}}_keys.npy", obs.keys)
        np.save(f"{{OUT}}_L{{obs.layer}}_values.npy", obs.values)
    return np.zeros(obs.keys.shape[:2])
'''


def policy_rows(folder, tag, *cache_flags):
    """obs.keys and obs.values [layer] at the end of heat_pump's prefill, from a Python policy."""
    out = os.path.join(folder, tag)
    policy = os.path.join(folder, f"dump_{tag}.py")
    with open(policy, "w") as f:
        f.write(DUMP_POLICY.format(out=out))
    res = subprocess.run([BINARY, "generate", "--prompt-file", PROMPT, "--max-new-tokens", "1", "--policy",
                          f"python:{policy}", "--budget", "50%", *cache_flags], capture_output=True, text=True,
                         timeout=600)
    check(res.returncode == 0, f"generate {' '.join(cache_flags)} with a Python policy exits 0 ({res.stderr.strip()[-300:]})")
    layers = []
    while os.path.exists(f"{out}_L{len(layers)}_keys.npy"):
        layers.append((np.load(f"{out}_L{len(layers)}_keys.npy"), np.load(f"{out}_L{len(layers)}_values.npy")))
    return layers


def check_policy_frame(folder, rows):
    # The unrotated f32 run's obs.keys/values are the rows the tool dumped (its cache is f32 and unrotated, and a
    # policy's evictions after a layer's prefill do not change later layers' rows), so they stand for that run.
    turned = policy_rows(folder, "f32rot", "--cache-type", "f32", "--cache-rotation", "hadamard")
    check(len(turned) == rows.shape[0], f"every layer scored ({len(turned)} of {rows.shape[0]})")
    worst = max((float(np.abs(rows[l, :, p] - layer[p]).max() / np.abs(rows[l, :, p]).max())
                 for l, layer in enumerate(turned) for p in range(2)), default=1.0)
    print(f"f32 with the rotation: obs.keys/values differ from the unrotated run's by at most {worst:.2e} of the "
          f"largest value")
    check(worst <= FRAME_TOLERANCE, f"at f32, obs.keys/values with the rotation are the unrotated run's ({worst:.2e})")
    q4 = policy_rows(folder, "q4rot", "--cache-type", "q4_0", "--cache-rotation", "hadamard")
    if not q4:
        return
    for p, part in enumerate(("keys", "values")):
        x = rows[0, :, p].reshape(-1, rows.shape[-1])
        expected = numpy_store(x, "q4_0", 64)[1].reshape(q4[0][p].shape)
        gap = float(np.abs(q4[0][p] - expected).max())
        check(gap <= 1e-5 * float(np.abs(expected).max()),
              f"q4_0 rotated: layer 0's obs.{part} are H dequantize(quantize(H x)) (max difference {gap:.2e})")


def check_trace(folder, rows):
    path = os.path.join(folder, "q4rot.h5")
    res = subprocess.run([BINARY, "trace", "--prompt-file", PROMPT, "--max-new-tokens", "1", "--quiet", "--cache-type",
                          "q4_0", "--cache-rotation", "hadamard", "--out", path], capture_output=True, text=True,
                         timeout=600)
    check(res.returncode == 0, f"trace --cache-rotation hadamard exits 0 ({res.stderr.strip()[-300:]})")
    if res.returncode != 0:
        return
    with h5py.File(path, "r") as f:
        attrs = f["runs"][list(f["runs"].keys())[0]].attrs
        text = lambda k: attrs[k].decode() if isinstance(attrs[k], bytes) else str(attrs[k])
        check(text("cache_type") == "q4_0:rot=hadamard", f"the trace records cache_type {text('cache_type')}")
        for p, part in enumerate(("keys", "values")):
            recorded = float(text(f"storage_nmse_{part}").split(",")[0])
            x = rows[0, :, p].reshape(-1, rows.shape[-1])
            expected = nmse(x, numpy_store(x, "q4_0", 64)[1])
            check(abs(recorded - expected) <= 1e-3 * expected,
                  f"the trace's layer-0 storage_nmse_{part} {recorded:.5e} is numpy's {expected:.5e}")


def main():
    for name, path in (("KVSCOPE_KV_BLOCK_TOOL", TOOL), ("KVSCOPE_BINARY", BINARY)):
        if not path or not os.path.exists(path):
            print(f"{name} is not set to an executable (got {path!r})")
            return 2
    with tempfile.TemporaryDirectory(prefix="kvscope_rotation_") as folder:
        rows = real_rows(folder)
        if rows is None:
            return 77
        check_storage(rows)
        check_policy_frame(folder, rows)
        check_trace(folder, rows)
    print(f"{passed()} checks passed, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
