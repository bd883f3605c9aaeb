#!/usr/bin/env python3
"""kvscope on a CUDA GPU: prefill and decode tok/s for 1K-8K prompts, the time a policy step adds to a decode
step, peak device memory with and without compression, and llama.cpp's CUDA build on the same GGUF where it can
be built (--llama-cpp). Not part of `make test`.

Without a CUDA device (kvscope info --json lists none) it says so and exits 0: nothing is measured.

usage: bench/gpu_bench.py [--kvscope build/app/kvscope] [--model M.gguf] [--lengths 1024,2048,4096,8000]
                          [--policies snapkv,h2o] [--budget 25%] [--llama-cpp]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from engine_vs_llamacpp import make_prompt  # noqa: E402  (the same prose prompts as the CPU benchmark)

LLAMA_CUDA_CHILD = r"""
import json, sys, time
import numpy as np
from llama_cpp import Llama
model, prompt_file, new_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = open(prompt_file, encoding="utf-8").read()
llm = Llama(model_path=model, n_ctx=8192 + new_tokens, n_batch=2048, n_ubatch=2048, n_gpu_layers=-1,
            verbose=False, logits_all=False)
tokens = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
t0 = time.perf_counter(); llm.eval(tokens); t1 = time.perf_counter()
tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
t2 = time.perf_counter()
for _ in range(new_tokens - 1):
    llm.eval([tok]); tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
t3 = time.perf_counter()
print(json.dumps({"prompt_tokens": len(tokens), "prefill_ms": (t1 - t0) * 1e3,
                  "decode_ms_per_token": (t3 - t2) * 1e3 / max(1, new_tokens - 1)}))
"""


class DeviceMemoryPeak:
    """Samples nvidia-smi's per-process used memory of one pid every 50 ms; the largest value is the peak."""

    def __init__(self, pid):
        self.pid, self.peak_mib, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout
                for line in out.splitlines():
                    pid, mib = [x.strip() for x in line.split(",")]
                    if int(pid) == self.pid:
                        self.peak_mib = max(self.peak_mib, int(mib))
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
            time.sleep(0.05)

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak_mib


def run_measured(argv):
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = DeviceMemoryPeak(proc.pid)
    out, err = proc.communicate()
    mib = peak.stop()
    if proc.returncode != 0:
        sys.exit(f"gpu_bench: {' '.join(argv)} failed: {err.strip()[-800:]}")
    return out, mib


def kvscope_run(args, prompt, policy, budget):
    argv = [args.kvscope, "generate", "--device", "cuda", "--model", args.model, "--prompt-file", prompt, "--json",
            "--ignore-eos", "--max-new-tokens", str(args.new_tokens), "--policy", policy]
    if budget:
        argv += ["--budget", budget]
    out, mib = run_measured(argv)
    j = json.loads(out)
    t = j["timings"]
    return {"prompt_tokens": len(j["prompt_tokens"]), "prefill_tps": t["prefill_tokens_per_s"],
            "decode_ms": t["decode_ms_per_token"], "peak_device_mib": mib,
            "peak_cache_mib": j["cache"]["peak_bytes"] / 2**20}


def llama_cpp_venv(args):
    """A venv with llama-cpp-python built for CUDA (GGML_CUDA=on); built on first use, None when that fails."""
    venv = os.path.join(ROOT, ".deps", "bench-venv-cuda")
    python = os.path.join(venv, "bin", "python")
    probe = [python, "-c", "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)"]
    if os.path.exists(python) and subprocess.run(probe).returncode == 0:
        return python
    print("gpu_bench: building llama-cpp-python with GGML_CUDA=on (tens of minutes)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    env = dict(os.environ, CMAKE_ARGS="-DGGML_CUDA=on")
    pip = [os.path.join(venv, "bin", "pip"), "install", "-q", "-r", os.path.join(HERE, "requirements.txt")]
    if subprocess.run(pip, env=env).returncode != 0 or subprocess.run(probe).returncode != 0:
        print("gpu_bench: llama.cpp's CUDA build could not be made here; its columns are left out")
        return None
    return python


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvscope", default=os.path.join(ROOT, "build", "app", "kvscope"))
    ap.add_argument("--model", default=os.path.join(ROOT, ".deps", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--lengths", default="1024,2048,4096,8000")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--policies", default="snapkv,h2o")
    ap.add_argument("--budget", default="25%")
    ap.add_argument("--llama-cpp", action="store_true", help="also measure llama.cpp's CUDA build")
    args = ap.parse_args()

    info = subprocess.run([args.kvscope, "info", "--model", args.model, "--json"], capture_output=True, text=True)
    if info.returncode != 0:
        sys.exit(f"gpu_bench: kvscope info failed: {info.stderr.strip()}")
    cuda = json.loads(info.stdout)["cuda"]
    if not cuda["devices"]:
        print(f"gpu_bench: no CUDA device ({cuda['why_none']}); nothing measured")
        return 0
    d = cuda["devices"][0]
    print(f"device 0: {d['name']}, compute capability {d['compute_capability']}, "
          f"{d['total_memory'] / 2**30:.1f} GiB; {args.new_tokens} new tokens; policies at budget {args.budget}")
    llama = llama_cpp_venv(args) if args.llama_cpp else None

    tmp = tempfile.mkdtemp(prefix="kvscope-gpu-bench-")
    child = os.path.join(tmp, "llama_cuda_child.py")
    with open(child, "w") as f:
        f.write(LLAMA_CUDA_CHILD)
    print(f"{'prompt':>7} {'run':>14} {'tokens':>6} {'prefill tok/s':>14} {'decode tok/s':>13} "
          f"{'step +ms':>9} {'peak dev MiB':>13} {'peak KV MiB':>12}")
    for length in [int(x) for x in args.lengths.split(",")]:
        prompt = os.path.join(tmp, f"prompt_{length}.txt")
        make_prompt(length, prompt)
        full = kvscope_run(args, prompt, "full", "")
        rows = [("kvscope full", full)]
        for policy in filter(None, args.policies.split(",")):
            rows.append((f"kvscope {policy}", kvscope_run(args, prompt, policy, args.budget)))
        for name, r in rows:
            # What a policy step adds: its decode step minus the full cache's (a smaller cache also makes
            # attention cheaper, so this is a lower bound on the policy's own cost).
            step = r["decode_ms"] - full["decode_ms"]
            print(f"{length:>7} {name:>14} {r['prompt_tokens']:>6} {r['prefill_tps']:>14.1f} {1000 / r['decode_ms']:>13.1f} "
                  f"{step:>9.3f} {r['peak_device_mib']:>13} {r['peak_cache_mib']:>12.1f}")
        if llama:
            out, mib = run_measured([llama, child, args.model, prompt, str(args.new_tokens)])
            r = json.loads(out)
            print(f"{length:>7} {'llama.cpp cuda':>14} {r['prompt_tokens']:>6} "
                  f"{1000 * r['prompt_tokens'] / r['prefill_ms']:>14.1f} {1000 / r['decode_ms_per_token']:>13.1f} "
                  f"{'':>9} {mib:>13} {'':>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
