"""The quantized KV cache stores llama.cpp's q8_0, q4_0 and q4_1 blocks byte for byte, and its bf16 and f16 rows
as ggml rounds them (issue 37, proof "bit layouts"): random rows chosen to reach the formats' edge cases, and real post-RoPE key and value rows of the
default model, are quantized by kvscope's cache (through tests/support/kv_block_tool.cpp, which appends them to a
CPU cache of that type and writes the stored bytes) and by the `gguf` package's quantizers (gguf.quants, the
Python restatement of ggml-quants.c's reference quantizers), and the bytes compared. The rows the cache reads
back must equal gguf's dequantization of the same blocks (q4_1 within the one rounding its `d * q + m` may or may
not fuse).

Run by ctest with the project venv; KVSCOPE_KV_BLOCK_TOOL points at the tool. Real rows need the default model;
without it the random rows still run.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from checks import FAILURES, check, passed

TOOL = os.environ.get("KVSCOPE_KV_BLOCK_TOOL", "")
TYPES = {"q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0, "q4_1": GGMLQuantizationType.Q4_1,
         "bf16": GGMLQuantizationType.BF16, "f16": GGMLQuantizationType.F16}
ROW_BYTES_PER_BLOCK = {"q8_0": 34, "q4_0": 18, "q4_1": 20, "bf16": 64, "f16": 64}  # bytes per 32 values


def kvscope_quantize(type_name, rows):
    """(stored bytes [n][row bytes], rows read back [n][d]) from kvscope's cache."""
    n, d = rows.shape
    res = subprocess.run([TOOL, "quantize", type_name, str(d)], input=np.ascontiguousarray(rows, np.float32).tobytes(),
                         capture_output=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"kv_block_tool quantize {type_name} failed: {res.stderr.decode()[-500:]}")
    row_bytes = d // 32 * ROW_BYTES_PER_BLOCK[type_name]
    stored = np.frombuffer(res.stdout[: n * row_bytes], np.uint8).reshape(n, row_bytes)
    back = np.frombuffer(res.stdout[n * row_bytes:], np.float32).reshape(n, d)
    return stored, back


def compare(label, type_name, rows):
    ours, back = kvscope_quantize(type_name, rows)
    theirs = quantize(rows.astype(np.float32), TYPES[type_name]).view(np.uint8).reshape(ours.shape)
    same = ours == theirs
    if not same.all():
        row, col = np.argwhere(~same)[0]
        block = col // ROW_BYTES_PER_BLOCK[type_name]
        values = rows[row, block * 32:(block + 1) * 32]
        print(f"  {label} {type_name}: first difference at row {row} byte {col}: kvscope {ours[row, col]} gguf "
              f"{theirs[row, col]}; block values {values.tolist()}")
    check(same.all(), f"{label}: {type_name} bytes equal gguf's ({int((~same).sum())} of {same.size} differ)")
    expected = dequantize(theirs, TYPES[type_name]).reshape(back.shape)
    if type_name == "q4_1":
        # x = d * q + m: one rounding more or less when the multiply-add is fused.
        scale = np.repeat(np.abs(expected.reshape(-1, 32)).max(axis=1), 32).reshape(back.shape)
        close = np.abs(back - expected) <= scale * 2.0 ** -22
    else:
        close = back == expected
    check(close.all(), f"{label}: {type_name} rows read back equal gguf's dequantization "
                       f"(max difference {float(np.abs(back - expected).max()) if back.size else 0.0})")
    return int(ours.size)


def random_rows(rng):
    """Rows of 128 values (four blocks each) that reach the formats' branches."""
    d = 128
    sets = {
        "normal": rng.standard_normal((64, d)).astype(np.float32),
        "wide range": (rng.standard_normal((64, d)) * np.exp(rng.uniform(-12, 8, (64, 1)))).astype(np.float32),
        "offset": (rng.uniform(-1, 1, (32, d)) + rng.uniform(-50, 50, (32, 1))).astype(np.float32),
        "heavy tails": rng.standard_cauchy((32, d)).astype(np.float32),
    }
    edge = np.zeros((8, d), np.float32)
    edge[1] = 3.25                                       # a constant block: q4_1's d = 0
    edge[2, :32] = np.arange(32) - 15.5                  # halves: q8_0's round-half-away-from-zero
    edge[2, 32:64] = np.linspace(-127, 127, 32)
    edge[3, :32] = rng.standard_normal(32)
    edge[3, 5], edge[3, 9] = 4.0, -4.0                   # equal magnitudes: q4_0 takes the first
    edge[3, 32:64] = rng.standard_normal(32)
    edge[3, 40], edge[3, 33] = 4.0, -4.0
    edge[4] = rng.standard_normal(d) * 1e-6              # scales near the half's subnormal range
    edge[5] = rng.standard_normal(d) * 1e-9              # scales that round to zero in half
    edge[6, ::2] = 1.0                                   # two levels
    edge[7] = np.tile(np.linspace(-8, 7, 16).repeat(2), 4)  # values on q4_0's grid
    sets["edge cases"] = edge
    # Values that land exactly between two q4 codes after scaling (ties of the truncation +0.5 / +8.5).
    grid = np.tile(np.arange(32, dtype=np.float32) / 31.0 * 15.0, (16, d // 32))
    sets["code boundaries"] = (grid + rng.integers(-3, 3, (16, 1))).astype(np.float32)
    sets["fused-rounding traps"] = fused_rounding_traps(rng)
    return sets


def fused_rounding_traps(rng):
    """Blocks whose scaled values round, as float32 products, exactly onto a q4 code boundary while the exact
    product lies just below it: a quantizer that fuses the product with the following +8.5 (q4_0) or +0.5 (q4_1)
    into one FMA truncates them one code lower than ggml's reference does."""
    blocks = []
    for _ in range(64):
        scale = np.float32(rng.uniform(0.05, 3.0))
        block = np.zeros(32, np.float32)
        block[0] = -8 * scale                                   # q4_0: d = block[0] / -8; q4_1: min = block[0]
        block[1] = 7 * scale                                    # q4_1: max
        q4_0_id = np.float32(1) / (block[0] / np.float32(-8))
        q4_1_id = np.float32(1) / ((block[1] - block[0]) / np.float32(15))
        filled = 2
        for target in np.arange(-7.5, 7.5, 1.0, dtype=np.float32):
            for shifted, inverse in ((False, q4_0_id), (True, q4_1_id)):
                # q4_0 truncates x*id + 8.5, q4_1 (x - min)*id + 0.5: both break on products k - 0.5 (q4_1's >= 0).
                if shifted and target < 0:
                    continue
                start = np.float32(np.float32(target / inverse) + (block[0] if shifted else 0))
                for ulps in sorted(range(-48, 49), key=abs):
                    candidate = (start.view(np.int32) + np.int32(ulps)).view(np.float32)
                    offset = np.float32(candidate - block[0]) if shifted else candidate
                    exact = float(offset) * float(inverse)
                    if np.float32(offset * inverse) == target and exact < float(target) and filled < 32:
                        block[filled] = candidate
                        filled += 1
                        break
        blocks.append(block)
    rows = np.stack(blocks).reshape(-1, 128)
    return rows


def real_rows(folder):
    """Key and value rows [rows][head_dim] of the default model at the end of a prefill, or None without it."""
    out = os.path.join(folder, "rows.f32")
    prompt = ("The lighthouse keeper climbed the stair at dusk, wound the clock, trimmed the wick and wrote in the "
              "log that the wind had turned to the north-east and the boats were all in harbour.")
    res = subprocess.run([TOOL, "rows", out, prompt], capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        print(f"real rows skipped: {res.stderr.strip()[-300:]}")
        return None
    shape = json.loads(res.stdout)
    rows = np.fromfile(out, np.float32).reshape(shape["layers"], shape["kv_heads"], 2, shape["entries"],
                                                shape["head_dim"])
    return rows[:, :, 0].reshape(-1, shape["head_dim"]), rows[:, :, 1].reshape(-1, shape["head_dim"])


def main():
    if not TOOL or not os.path.exists(TOOL):
        print(f"KVSCOPE_KV_BLOCK_TOOL is not set to an executable (got {TOOL!r})")
        return 2
    rng = np.random.default_rng(37)
    compared = 0
    for label, rows in random_rows(rng).items():
        for type_name in TYPES:
            compared += compare(f"random rows ({label})", type_name, rows)
    with tempfile.TemporaryDirectory(prefix="kvscope_block_quant_") as folder:
        real = real_rows(folder)
        if real is not None:
            keys, values = real
            check(keys.shape[0] > 1000 and np.isfinite(keys).all(), f"real key rows: {keys.shape}")
            for type_name in TYPES:
                compared += compare("real keys", type_name, keys)
                compared += compare("real values", type_name, values)
    print(f"{compared} quantized bytes compared; {passed()} checks passed, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
