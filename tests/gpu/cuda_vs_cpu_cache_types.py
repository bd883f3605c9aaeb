"""The quantized KV-cache types on --device cuda against --device cpu on the default model (label gpu).

Skips (exit 77) when `kvscope info --json` lists no CUDA device. `--devices cpu,cpu` runs the comparison on the CPU
twice, which checks this script on a machine without a GPU (it must pass there).

Both devices store the same bytes (the same quantizer, kernels/common/cache_rows.h) and read the same floats from
them; they differ in the model's arithmetic (CUDA multiplies float16 weights and activations, the CPU reads the
GGUF blocks in float32: tests/gpu/cuda_vs_cpu_policies.py), so greedy tokens may part only at a near tie. For each
of q4_0, q8_0, keys q8_0 / values q4_0 and kivi2 (G 32, R 32, so that the prompt's keys leave the residual),
full cache, one prompt x 16 greedy tokens: the same tokens (or a parting
where the two devices' log-probabilities of their own choices are within 0.05 nats: a near tie), the chosen
tokens' log-probabilities within 0.1 nats before any parting, and `cache.entry_bytes` and `cache.type` equal. Then
SnapKV at 50 % on q4_0 and on kivi4 (an eviction re-packs key groups), and KVMerger at 50 % on kivi4 (merges
quantize key groups again), 4 tokens each: the same first token and the same kept counts per layer and KV head
(not the bytes: which entries a policy evicts may differ at near ties, and a KIVI group's bytes depend on it).
The CUDA side of this test was written and compiled without a GPU and has not run yet (docs/gpu.md).
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from checks import FAILURES, check, passed  # noqa: E402

PROMPT = ("The history of the printing press begins with movable type in East Asia and continues with Gutenberg's "
          "press in Mainz around 1450, which made books cheap enough for ordinary readers. Summarise this in one "
          "sentence.")
TYPES = [["--cache-type", "q4_0"], ["--cache-type", "q8_0"], ["--cache-type-k", "q8_0", "--cache-type-v", "q4_0"],
         ["--cache-type", "kivi2:group=32,residual=32"]]
KIVI4 = ["--cache-type", "kivi4:group=32,residual=16"]


def generate(binary, device, extra, tokens, policy="full", budget=None):
    argv = [binary, "generate", "--device", device, "--prompt", PROMPT, "--json", "--max-new-tokens", str(tokens),
            "--ignore-eos", "--policy", policy] + extra
    if budget:
        argv += ["--budget", budget]
    res = subprocess.run(argv, capture_output=True, text=True)
    ok = res.returncode == 0
    check(ok, f"generate --device {device} {' '.join(extra)} --policy {policy} exits 0 "
                                    f"(stderr: {res.stderr.strip()[-500:]})")
    if device == "cuda":
        check("has never run on" in res.stderr, f"generate --device cuda {' '.join(extra)} warns that the path never "
                                                f"ran on a GPU (stderr: {res.stderr.strip()[-300:]})")
    return json.loads(res.stdout) if ok else None


def compare(binary, devices, extra):
    name = " ".join(extra)
    a, b = (generate(binary, d, extra, 16) for d in devices)
    if a is None or b is None:
        return
    ids_a, ids_b = a["generated_tokens"], b["generated_tokens"]
    first_diff = next((i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y), None)
    upto = first_diff if first_diff is not None else min(len(ids_a), len(ids_b))
    lp = max((abs(x - y) for x, y in zip(a["logprobs"][:upto], b["logprobs"][:upto])), default=0.0)
    check(lp < 0.1, f"{name}: chosen tokens' log-probabilities differ by at most {lp:.4f} nats over {upto} steps")
    if first_diff is None:
        check(ids_a == ids_b, f"{name}: the {len(ids_a)} greedy tokens are equal")
    else:
        margin = abs(a["logprobs"][first_diff] - b["logprobs"][first_diff])
        check(margin < 0.05, f"{name}: tokens equal for {first_diff} steps, then differ ({devices[0]} "
                             f"{ids_a[first_diff]} at {a['logprobs'][first_diff]:.4f}, {devices[1]} "
                             f"{ids_b[first_diff]} at {b['logprobs'][first_diff]:.4f})")
    check(a["cache"]["type"] == b["cache"]["type"], f"{name}: cache.type {a['cache']['type']} on both")
    check(a["cache"]["entry_bytes"] == b["cache"]["entry_bytes"],
          f"{name}: cache.entry_bytes {a['cache']['entry_bytes']} ({devices[0]}) and {b['cache']['entry_bytes']} "
          f"({devices[1]})")
    print(f"     {name}: {upto} of {len(ids_a)} tokens equal, log-prob difference {lp:.4f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvscope", default=os.environ.get("KVSCOPE_BINARY"))
    ap.add_argument("--devices", default="cpu,cuda", help="the two devices compared (cpu,cpu checks this script)")
    args = ap.parse_args()
    devices = args.devices.split(",")
    info = subprocess.run([args.kvscope, "info", "--devices", "--json"], capture_output=True, text=True)
    cuda = json.loads(info.stdout)["cuda"] if info.returncode == 0 else {"devices": [], "why_none": info.stderr}
    if "cuda" in devices and not cuda["devices"]:
        print(f"SKIPPED: no CUDA device ({cuda['why_none']})")
        return 77
    for extra in TYPES:
        compare(args.kvscope, devices, extra)
    for policy, extra in [("snapkv", ["--cache-type", "q4_0"]), ("snapkv", KIVI4), ("kvmerger", KIVI4)]:
        name = f"{policy} 50% {extra[1]}"
        a, b = (generate(args.kvscope, d, extra, 4, policy, "50%") for d in devices)
        if a is None or b is None:
            continue
        check(a["generated_tokens"][:1] == b["generated_tokens"][:1], f"{name}: the same first token")
        check(a["cache"]["kept"] == b["cache"]["kept"], f"{name}: kept counts per layer and KV head equal")
    print(f"{passed()} checks passed, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
