"""kvscope's KIVI cache types (kivi2, kivi4) against a numpy implementation written here from the paper (issue 37,
proof "bit layouts" for KIVI): Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache"
(ICML 2024), section 3.1 and Algorithm 1. The equations implemented:

    asymmetric B-bit quantization of a group X:  z = min X,  s = (max X - min X) / (2^B - 1),
                                                 Q(X) = round((X - z) / s),  X' = Q(X) * s + z
    keys per channel: a group is G consecutive tokens of one channel (one s, z per channel and group);
    values per token: a group is G consecutive channels of one token (one s, z per token and group);
    the newest R tokens stay in full precision.

kvscope's choices, restated here as the model's own rules (kernels/cpu/kivi_part.h): s and z are stored as IEEE
halves and Q uses the stored halves (s = 0 codes 0; codes clamped to [0, 2^B - 1]; round half to even); full
precision is float32; after each append values older than the newest R are quantized one token at a time and
keys G tokens at a time once G of them are older than the newest R; an eviction keeps each surviving key's codes
and its group's (s, z), and frees a group with no survivors.

The tool (tests/support/kv_block_tool.cpp) appends a prefill at once, evicts, then appends the rest one token at
a time; the rows the cache reads back must equal the model's dequantized rows exactly, and its bytes the model's
count: keys G (4 D + G D B / 8) per full group (D half scales, D half zero points, codes), values 4 D / G + D B / 8
per quantized token, 4 D per full-precision row. Without eviction the bytes must also equal the closed form of
the append rule. Real post-RoPE keys and values of the default model are run too (when it is present).

Run by ctest with the project venv; KVSCOPE_KV_BLOCK_TOOL points at the tool.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from checks import FAILURES, check, passed

TOOL = os.environ.get("KVSCOPE_KV_BLOCK_TOOL", "")
F32 = 4
HALF = 2


def quantize_group(x, bits):
    """KIVI's asymmetric min/max quantization of one group, dequantized: Q(X) * s + z (float32)."""
    x = np.asarray(x, np.float32)
    s = np.float32(np.float16((x.max() - x.min()) / np.float32(2 ** bits - 1)))
    z = np.float32(np.float16(x.min()))
    if not s > 0:
        q = np.zeros_like(x)
    else:
        q = np.clip(np.rint((x - z) / s), 0, 2 ** bits - 1).astype(np.float32)
    return (q * s + z).astype(np.float32)


class KiviModel:
    """One (layer, KV head) part under KIVI, as the paper's equations and the rules above say."""

    def __init__(self, bits, group, residual, head_dim, keys):
        self.bits, self.g, self.r, self.d, self.keys = bits, group, residual, head_dim, keys
        self.groups = []     # keys: lists of dequantized rows; values: one row per list
        self.residual = []   # full-precision rows

    def append(self, rows):
        self.residual += [np.asarray(r, np.float32) for r in rows]
        if self.keys:
            while len(self.residual) >= self.r + self.g:
                block = np.stack(self.residual[:self.g])
                self.residual = self.residual[self.g:]
                deq = np.stack([quantize_group(block[:, c], self.bits) for c in range(self.d)], axis=1)
                self.groups.append(list(deq))
        else:
            while len(self.residual) > self.r:
                row = self.residual.pop(0)
                deq = np.concatenate([quantize_group(row[k:k + self.g], self.bits) for k in range(0, self.d, self.g)])
                self.groups.append([deq])

    def evict(self, keep):
        keep, index, groups = set(keep), 0, []
        for group in self.groups:
            survivors = [row for i, row in enumerate(group, start=index) if i in keep]
            index += len(group)
            if survivors:
                groups.append(survivors)
        self.groups = groups
        self.residual = [row for i, row in enumerate(self.residual, start=index) if i in keep]

    def rows(self):
        return np.array([row for group in self.groups for row in group] + self.residual, np.float32)

    def bytes(self):
        codes = self.d * self.bits // 8
        if self.keys:
            quantized = sum(2 * HALF * self.d + len(group) * codes for group in self.groups)
        else:
            quantized = len(self.groups) * (2 * HALF * (self.d // self.g) + codes)
        return quantized + len(self.residual) * F32 * self.d


def closed_form(bits, group, residual, head_dim, n, keys):
    """Bytes of n tokens of a part that kept every token (the append rule's counts)."""
    codes, full = head_dim * bits // 8, F32 * head_dim
    if keys:
        res = n if n < residual + group else residual + (n - residual) % group
        return (n - res) // group * (2 * HALF * head_dim + group * codes) + res * full
    res = min(n, residual)
    return (n - res) * (2 * HALF * head_dim // group + codes) + res * full


def run_tool(spec, keys, values, prefill, keep):
    n, d = keys.shape
    data = np.ascontiguousarray(keys, np.float32).tobytes() + np.ascontiguousarray(values, np.float32).tobytes()
    res = subprocess.run([TOOL, "kivi", spec, str(d), str(prefill), "all" if keep is None else ",".join(map(str, keep))],
                         input=data, capture_output=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"kv_block_tool kivi {spec} failed: {res.stderr.decode()[-500:]}")
    header, _, payload = res.stdout.partition(b"\n")
    info = json.loads(header)
    size = info["size"]
    back = np.frombuffer(payload, np.float32).reshape(2, size, d)
    return info, back[0], back[1]


def compare(label, bits, group, residual, keys, values, prefill, keep=None):
    n, d = keys.shape
    spec = f"kivi{bits}:group={group},residual={residual}"
    info, back_keys, back_values = run_tool(spec, keys, values, prefill, keep)
    models = {}
    for part, rows in (("keys", keys), ("values", values)):
        model = KiviModel(bits, group, residual, d, part == "keys")
        model.append(rows[:prefill])
        if keep is not None:
            model.evict(keep)
        for row in rows[prefill:]:
            model.append([row])
        models[part] = model
    where = f"{label}, {spec}, {n} rows of {d}, prefill {prefill}{'' if keep is None else f', {len(keep)} kept'}"
    for part, back in (("keys", back_keys), ("values", back_values)):
        expected = models[part].rows()
        same = back.shape == expected.shape and np.array_equal(back, expected)
        detail = "" if same or back.shape != expected.shape else \
            f" (max difference {float(np.abs(back - expected).max())} at {np.unravel_index(np.abs(back - expected).argmax(), back.shape)})"
        check(same, f"{where}: {part} read back equal the numpy KIVI's ({back.shape} vs {expected.shape}){detail}")
        check(info[f"{part[:-1]}_bytes"] == models[part].bytes(),
              f"{where}: {part} bytes {info[f'{part[:-1]}_bytes']} == the model's {models[part].bytes()}")
        if keep is None:
            form = closed_form(bits, group, residual, d, n, part == "keys")
            check(info[f"{part[:-1]}_bytes"] == form, f"{where}: {part} bytes == closed form {form}")
    check(info["entry_bytes"] == info["key_bytes"] + info["value_bytes"] and info["allocated"] >= info["entry_bytes"],
          f"{where}: entry bytes are keys plus values, within the allocation")
    # Quantization changes what it stores, or the comparison above proves nothing.
    return float(np.mean((back_keys - keys[:len(back_keys)]) ** 2)) if keep is None else 0.0


def random_sets(rng, d):
    normal = rng.standard_normal((200, d)).astype(np.float32)
    outliers = normal.copy()
    outliers[:, 3] *= 40.0                              # an outlier channel: why KIVI quantizes keys per channel
    outliers[:, 17] += 25.0
    edge = rng.standard_normal((120, d)).astype(np.float32)
    edge[:, 5] = 1.5                                    # a constant channel (s = 0 per channel for keys)
    edge[40:60] = -2.25                                 # constant tokens (s = 0 per token for values)
    edge[70:90] *= 1e-7                                 # scales that round to half subnormals or zero
    edge[95, :] = np.tile(np.array([0.0, 1.0, 2.0, 3.0], np.float32), d // 4)  # values on 2-bit codes' grid
    return {"normal": normal, "outlier channels": outliers, "edge cases": edge}


def real_rows(folder):
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
    return rows


def main():
    if not TOOL or not os.path.exists(TOOL):
        print(f"KVSCOPE_KV_BLOCK_TOOL is not set to an executable (got {TOOL!r})")
        return 2
    rng = np.random.default_rng(2024)
    mse = {}
    for d in (64, 128):
        for label, rows in random_sets(rng, d).items():
            n = len(rows)
            values = rows[::-1].copy()
            for bits in (2, 4):
                for group, residual in ((8, 16), (32, 128), (16, 0), (32, 40)):
                    mse[(label, bits)] = compare(label, bits, group, residual, rows, values, prefill=n)
                    compare(label, bits, group, residual, rows, values, prefill=n // 2)
                    compare(label, bits, group, residual, rows, values, prefill=1)
                    # Eviction: every third entry of the prefill and a run inside one group, then decode.
                    prefill = n // 2
                    keep = sorted(set(range(0, prefill, 3)) | set(range(10, 14)))
                    compare(label, bits, group, residual, rows, values, prefill, keep)
                    compare(label, bits, group, residual, rows, values, prefill, [prefill - 1])
    check(mse[("normal", 2)] > mse[("normal", 4)] > 0.0,
          f"2 bits lose more than 4 bits, and both lose something (key MSE {mse[('normal', 2)]:.4g} vs "
          f"{mse[('normal', 4)]:.4g})")
    with tempfile.TemporaryDirectory(prefix="kvscope_kivi_") as folder:
        real = real_rows(folder)
        if real is not None:
            layers, kv_heads, _, entries, d = real.shape
            for layer in (0, layers // 2, layers - 1):
                for bits in (2, 4):
                    keys, values = real[layer, 0, 0], real[layer, 0, 1]
                    compare(f"real rows of layer {layer}", bits, 32, 16, keys, values, prefill=entries - 4)
                    compare(f"real rows of layer {layer}", bits, 32, 16, keys, values, prefill=entries - 4,
                            keep=list(range(0, entries - 4, 2)))
    print(f"{passed()} checks passed, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
