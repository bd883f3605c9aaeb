#!/usr/bin/env python3
"""Writes tests/fixtures/dequant_smollm2.json: reference dequantizations made by the gguf Python package
(gguf==0.19.0, an implementation independent of kvscope's C++ code), which test_core_model compares against.

It holds
  - the first rows of two tensors of the default model, dequantized by gguf.quants.dequantize;
  - a few seeded random blocks of every type kvscope dequantizes, with their dequantized values;
  - the package's table of block sizes.

Usage: python3 tools/make_dequant_golden.py [MODEL.gguf] [OUT.json]
"""
import hashlib
import json
import pathlib
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / ".deps/models/SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = ROOT / "tests/fixtures/dequant_smollm2.json"
ROWS = 2
TENSORS = ["token_embd.weight", "blk.0.attn_q.weight"]
# Types kvscope dequantizes, with how many blocks of random data to write for each.
RANDOM_TYPES = {"F16": 64, "BF16": 64, "Q4_0": 4, "Q4_1": 4, "Q8_0": 4, "Q4_K": 2, "Q6_K": 2}
# Byte offsets of the fp16 scale fields in one block, which must hold finite values.
HALF_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q8_0": [0], "Q4_K": [0, 2], "Q6_K": [208]}


def floats(values):
    # float32 values written as the shortest decimal that round-trips through a double.
    return [float(v) for v in np.asarray(values, dtype=np.float32).ravel()]


def model_rows(model_path):
    reader = GGUFReader(str(model_path))
    tensors = {t.name: t for t in reader.tensors}
    out = {}
    for name in TENSORS:
        t = tensors[name]
        qtype = GGMLQuantizationType(t.tensor_type)
        rows = dequantize(np.asarray(t.data[:ROWS]), qtype)
        out[name] = {"type": qtype.name, "cols": int(t.shape[0]), "rows": [floats(r) for r in rows]}
    return out


def random_blocks(rng):
    out = {}
    for name, n_blocks in RANDOM_TYPES.items():
        qtype = GGMLQuantizationType[name]
        block_elements, block_bytes = GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
        if name in ("F16", "BF16"):
            # Random bit patterns cover subnormals and both signs; infinities and NaNs (all-ones exponent)
            # have no JSON number, so they become 1.0 here and are tested in C++ against a closed form.
            values = raw.reshape(-1).view(np.uint16)
            exponent_mask, one = (0x7C00, 0x3C00) if name == "F16" else (0x7F80, 0x3F80)
            values[(values & exponent_mask) == exponent_mask] = one
            raw = values.view(np.uint8).reshape(n_blocks, block_bytes)
        for offset in HALF_FIELDS.get(name, []):
            scale = rng.uniform(-0.05, 0.05, size=n_blocks).astype(np.float16)
            raw[:, offset:offset + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
        values = dequantize(raw.reshape(-1), qtype)
        out[name] = {"bytes": raw.reshape(-1).tobytes().hex(), "elements": n_blocks * block_elements,
                     "values": floats(values)}
    return out


def main():
    model_path = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else MODEL
    out_path = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else OUT
    sha = hashlib.sha256(model_path.read_bytes()).hexdigest()
    golden = {
        "generator": "tools/make_dequant_golden.py with gguf==0.19.0",
        "model": model_path.name,
        "model_sha256": sha,
        "tensors": model_rows(model_path),
        "random_blocks": random_blocks(np.random.default_rng(20240613)),
        "block_sizes": {t.name: list(GGML_QUANT_SIZES[t]) for t in GGML_QUANT_SIZES},
    }
    out_path.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
