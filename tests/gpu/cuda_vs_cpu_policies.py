"""Every policy on --device cuda against --device cpu on the default model (label gpu).

Skips (exit 77) when `kvscope info --json` lists no CUDA device. The two backends differ by design in
arithmetic: the CPU reads Q4_1 blocks and accumulates in float32; CUDA dequantizes the weights to float16 once
and multiplies float16 activations with float32 accumulation (cuBLAS). So the test asks for what must agree
despite that: the same first generated token (greedy), its log-probability within 0.05 nats, and kept sets
at the first recorded step (the end of the prefill, or of its first block) that overlap almost entirely
(Jaccard >= 0.9 per layer and KV head: a near-tie in attention scores may swap an entry or two at the budget
boundary).
"""
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from checks import FAILURES, check, passed  # noqa: E402

POLICIES = ["full", "streaming_llm", "h2o", "tova", "snapkv", "pyramidkv", "d2o", "dynamickv", "caote", "kvmerger",
            "cake"]
PROMPT = ("The history of the printing press begins with movable type in East Asia and continues with Gutenberg's "
          "press in Mainz around 1450, which made books cheap enough for ordinary readers. Summarise this in one "
          "sentence.")


def cuda_devices(binary):
    res = subprocess.run([binary, "info", "--json"], capture_output=True, text=True)
    if res.returncode != 0:
        print(res.stderr)
        sys.exit(1)
    return json.loads(res.stdout)["cuda"]


def run_trace(binary, device, out):
    cmd = [binary, "trace", "--device", device, "--prompt", PROMPT, "--max-new-tokens", "4", "--budget", "50%",
           "--quiet", "--force", "--out", out]
    for p in POLICIES:
        cmd += ["--policy", p]
    res = subprocess.run(cmd, capture_output=True, text=True)
    check(res.returncode == 0, f"kvscope trace --device {device} exits 0 (stderr: {res.stderr.strip()[-500:]})")
    return res.returncode == 0


def jaccard(a, b):
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else np.logical_and(a, b).sum() / union


def main():
    binary = os.environ["KVSCOPE_BINARY"]
    cuda = cuda_devices(binary)
    if not cuda["devices"]:
        print(f"SKIPPED: no CUDA device ({cuda['why_none']})")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        traces = {d: os.path.join(tmp, f"{d}.h5") for d in ("cpu", "cuda")}
        if not all(run_trace(binary, d, traces[d]) for d in traces):
            return 1
        with h5py.File(traces["cpu"], "r") as cpu, h5py.File(traces["cuda"], "r") as gpu:
            check(sorted(cpu["runs"]) == sorted(gpu["runs"]), "both traces hold the same runs")
            for name in cpu["runs"]:
                c, g = cpu["runs"][name], gpu["runs"][name]
                ids_c, ids_g = c["tokens/generated_ids"][:], g["tokens/generated_ids"][:]
                check(len(ids_c) > 0 and len(ids_g) > 0 and ids_c[0] == ids_g[0], f"{name}: same first token")
                lp_c, lp_g = c["tokens/logprobs"][:], g["tokens/logprobs"][:]
                check(abs(float(lp_c[0]) - float(lp_g[0])) < 0.05,
                      f"{name}: first token log-prob {lp_c[0]:.4f} (cpu) vs {lp_g[0]:.4f} (cuda)")
                for layer in c["kept_mask"]:
                    mc, mg = c["kept_mask"][layer][:, :, 0] == 1, g["kept_mask"][layer][:, :, 0] == 1
                    for head in range(mc.shape[0]):
                        j = jaccard(mc[head], mg[head])
                        check(j >= 0.9, f"{name} {layer} KV head {head}: kept sets at step 0 overlap {j:.3f}")
    print(f"{passed()} checks passed, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
