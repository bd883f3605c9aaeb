#!/usr/bin/env python3
"""kvscope vs llama.cpp on the same GGUF, prompts and thread count, measured in one run.

Prints prefill tok/s, decode tok/s (wall time, and CPU time: see run()), peak RSS of each, and the ratios
kvscope / llama.cpp.
Each engine runs in its own child process so its peak RSS is its own (os.wait4 rusage).
--cache-types runs kvscope once per KV cache type, and llama.cpp once per type of those it has (f32, f16, q8_0,
q4_0, q4_1: `type_k`/`type_v`, with flash attention for a quantized V cache, which llama.cpp requires; llama.cpp at
f16 keeps its default attention path); each kvscope type is then compared with kvscope's f16 (when run) and with
llama.cpp at the same type (or llama.cpp's f16 where llama.cpp lacks the type: bf16, KIVI); a rotated type
(`q4_0:rot=hadamard`, docs/quantized_cache.md) with llama.cpp at its type, which rotates its quantized cache by
default. Without any type
llama.cpp has, llama.cpp runs at its default f16 cache. --baseline adds another
kvscope binary (say, main's build before a change) measured in the same run, at its default settings.
--no-cpu-time skips the second, one-token run per engine that the decode CPU-time column needs (long prompts).
--busy N measures every engine a second time with N CPU hogs (processes that spin) beside it, at the same
thread count, and prints each engine's slowdown: quiet tok/s (best) over busy tok/s (median and worst of the
repeats, since a shared machine's bad runs are what a user waits through).

usage: bench/engine_vs_llamacpp.py --kvscope build/app/kvscope --model M.gguf [--threads 2] [--repeats 3]
                                   [--cache-types f32,f16] [--baseline /path/to/other/kvscope] [--busy 1]
                                   [--lengths 977,4096] [--no-cpu-time]
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

LLAMA_CHILD = r"""
import json, sys, time
import llama_cpp
from llama_cpp import Llama
model, prompt_file, threads, new_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
cache_type = sys.argv[5] if len(sys.argv) > 5 else "default"
text = open(prompt_file, encoding="utf-8").read()
vocab = Llama(model_path=model, vocab_only=True, verbose=False)
tokens = vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False)
del vocab
# The context holds the prompt and the new tokens (rounded up to 256), so that the KV cache llama.cpp allocates
# up front is what the run needs, not a fixed 4096 or 8192 tokens.
n_ctx = max(4096, (len(tokens) + new_tokens + 255) // 256 * 256)
extra = {}
if cache_type != "default":
    kind = getattr(llama_cpp, "GGML_TYPE_" + cache_type.upper())
    extra = {"type_k": kind, "type_v": kind}
    if cache_type not in ("f16", "f32"):
        extra["flash_attn"] = True  # llama.cpp stores a quantized V cache only with flash attention
llm = Llama(model_path=model, n_ctx=n_ctx, n_batch=2048, n_ubatch=2048, n_threads=threads,
            n_threads_batch=threads, verbose=False, logits_all=False, **extra)
t0 = time.perf_counter()
llm.eval(tokens)
t1 = time.perf_counter()
import numpy as np
generated = []
# The last position's logits from llama.cpp itself: llama-cpp-python keeps `scores` only with logits_all (its
# rows past n_batch do not exist), so reading them gave token 0 at every step and failed past 2048 tokens.
n_vocab = llm.n_vocab()
def last_logits():
    return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
tok = int(np.argmax(last_logits()))
t2 = time.perf_counter()
for _ in range(new_tokens - 1):
    generated.append(tok)
    llm.eval([tok])
    tok = int(np.argmax(last_logits()))
t3 = time.perf_counter()
print(json.dumps({"prompt_tokens": len(tokens), "prefill_ms": (t1 - t0) * 1e3,
                  "decode_ms_per_token": (t3 - t2) * 1e3 / max(1, new_tokens - 1)}))
"""


# The cache types llama.cpp stores (of those kvscope has too), as llama_cpp.GGML_TYPE_<NAME>.
LLAMA_CACHE_TYPES = ("f32", "f16", "q8_0", "q4_0", "q4_1")


def measure(argv):
    # os.wait4 must reap the child itself to get its rusage.
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        out_fd = os.open(argv[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out_fd, 1)
        os.dup2(devnull, 2)
        os.execvp(argv[0], argv[:-1])
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"benchmark child failed: {' '.join(argv[:-1])}")
    with open(argv[-1], encoding="utf-8") as f:
        out = f.read()
    return out, usage.ru_maxrss / 1024.0, usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def cpu_hogs(count):
    """`count` processes that each keep one core busy until the block ends."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def make_prompt(tokens, path):
    base = open(os.path.join(ROOT, "sample_data", "prompts", "lighthouse_story.txt"), encoding="utf-8").read()
    # About 1.25 tokens per word for English prose with this vocabulary; trimmed by words to the target.
    words = []
    while len(words) < tokens * 2:
        words += base.split()
    text = " ".join(words[: int(tokens * 0.78)])
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvscope", default=os.path.join(ROOT, "build", "app", "kvscope"))
    ap.add_argument("--model", default=os.path.join(ROOT, ".deps", "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lengths", default="128,1024")
    ap.add_argument("--cache-types", default="f32,f16", help="kvscope --cache-type values to run")
    ap.add_argument("--baseline", default="", help="another kvscope binary to measure in the same run")
    ap.add_argument("--busy", type=int, default=0, help="also measure with this many CPU hogs beside each engine")
    ap.add_argument("--no-cpu-time", action="store_true", help="skip the one-token runs of the CPU-time column")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="kvscope-bench-")
    child = os.path.join(tmp, "llama_child.py")
    with open(child, "w") as f:
        f.write(LLAMA_CHILD)
    print(f"threads {args.threads}, {args.new_tokens} new tokens, best of {args.repeats}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'prompt':>7} {'engine':>12} {'tokens':>6} {'prefill tok/s':>14} {'decode tok/s':>13} "
          f"{'decode CPU-t/s':>15} {'peak RSS MiB':>13}")
    # (name, binary, extra arguments) of every kvscope variant; llama.cpp runs last.
    variants = [(f"kvscope-{t}", args.kvscope, ["--cache-type", t]) for t in args.cache_types.split(",") if t]
    if args.baseline:
        variants.append(("baseline", args.baseline, []))
    # llama.cpp at each of those types it has; at its default (f16) when it has none of them.
    llama_types = [t for t in args.cache_types.split(",") if t in LLAMA_CACHE_TYPES]
    llama_variants = [(f"llama.cpp-{t}", None, [t]) for t in llama_types] or [("llama.cpp", None, ["default"])]
    for length in [int(x) for x in args.lengths.split(",")]:
        prompt = os.path.join(tmp, f"prompt_{length}.txt")
        make_prompt(length, prompt)
        results = {}
        def run(binary, extra, new_tokens):
            out_path = os.path.join(tmp, "out.json")
            if binary:
                argv = [binary, "generate", "--model", args.model, "--prompt-file", prompt, "--json",
                        "--ignore-eos", "--max-new-tokens", str(new_tokens), "--threads", str(args.threads)]
                out, rss, cpu = measure(argv + extra + [out_path])
                j = json.loads(out)
                rec = {"prompt_tokens": len(j["prompt_tokens"]), "prefill_ms": j["timings"]["prefill_ms"],
                       "decode_ms_per_token": j["timings"]["decode_ms_per_token"]}
            else:
                argv = [sys.executable, child, args.model, prompt, str(args.threads), str(new_tokens), *extra, out_path]
                out, rss, cpu = measure(argv)
                rec = json.loads(out)
            rec["rss"], rec["cpu_s"] = rss, cpu
            return rec

        engines = variants + llama_variants
        best = {engine: None for engine, _, _ in engines}
        cpu_tps = {engine: 0.0 for engine, _, _ in engines}
        for _ in range(args.repeats):  # engines interleaved, so a change in the machine's load hits all of them
            for engine, binary, extra in engines:
                rec = run(binary, extra, args.new_tokens)
                rec["prefill_tps"] = 1000.0 * rec["prompt_tokens"] / rec["prefill_ms"]
                rec["decode_tps"] = 1000.0 / rec["decode_ms_per_token"]
                b = best[engine]
                if b is None or rec["prefill_tps"] + rec["decode_tps"] > b["prefill_tps"] + b["decode_tps"]:
                    best[engine] = rec
                # Decode measured in CPU time, which a loaded machine disturbs far less than wall time: the
                # same run with one new token costs the same start-up and prefill, so the difference is the
                # other new_tokens - 1 steps. (With several threads it also counts OpenMP's spinning.)
                if args.no_cpu_time:
                    continue
                one = run(binary, extra, 1)
                if rec["cpu_s"] > one["cpu_s"]:
                    cpu_tps[engine] = max(cpu_tps[engine], (args.new_tokens - 1) / (rec["cpu_s"] - one["cpu_s"]))
        for engine, _, _ in engines:
            b = best[engine]
            b["decode_cpu_tps"] = cpu_tps[engine]
            results[engine] = b
            print(f"{length:>7} {engine:>12} {b['prompt_tokens']:>6} {b['prefill_tps']:>14.1f} "
                  f"{b['decode_tps']:>13.1f} {b['decode_cpu_tps']:>15.1f} {b['rss']:>13.1f}")
        print(f"{length:>7} ratios of each kvscope run to llama.cpp at the same cache type (prefill, decode, decode CPU, "
              f"RSS) and its decode tok/s to kvscope f16's")
        for engine, _, _ in variants:
            k = results[engine]
            own = engine.replace("kvscope-", "")
            # A rotated type (q4_0:rot=hadamard) against llama.cpp's own, which rotates its quantized cache too.
            base = own.replace(":rot=hadamard", "")
            peer = f"llama.cpp-{base}" if f"llama.cpp-{base}" in results else \
                "llama.cpp-f16" if "llama.cpp-f16" in results else llama_variants[0][0]
            l = results[peer]
            cpu_ratio = k["decode_cpu_tps"] / l["decode_cpu_tps"] if l["decode_cpu_tps"] > 0 else float("nan")
            f16 = results.get("kvscope-f16")
            vs_f16 = f"{k['decode_tps'] / f16['decode_tps']:.2f}" if f16 else "-"
            print(f"{length:>7} {'ratio ' + own:>12} {'':>6} "
                  f"{k['prefill_tps'] / l['prefill_tps']:>14.2f} {k['decode_tps'] / l['decode_tps']:>13.2f} "
                  f"{cpu_ratio:>15.2f} {k['rss'] / l['rss']:>13.2f}   vs {peer}; decode / kvscope f16 {vs_f16}")
        if args.busy:
            # Busy runs after the quiet ones, engines interleaved again; the hogs start before each engine
            # so that its whole run (start-up, prefill, decode) shares the cores.
            busy = {engine: [] for engine, _, _ in engines}
            for _ in range(args.repeats):
                for engine, binary, extra in engines:
                    with cpu_hogs(args.busy):
                        rec = run(binary, extra, args.new_tokens)
                    busy[engine].append((1000.0 * rec["prompt_tokens"] / rec["prefill_ms"], 1000.0 / rec["decode_ms_per_token"]))
            print(f"{length:>7} {'with ' + str(args.busy) + ' CPU hog(s)':>20}  prefill tok/s median / worst (slowdown)"
                  f"   decode tok/s median / worst (slowdown)")
            for engine, _, _ in engines:
                prefill = [p for p, _ in busy[engine]]
                decode = [d for _, d in busy[engine]]
                q = results[engine]
                print(f"{length:>7} {engine:>20}  {statistics.median(prefill):>8.1f} / {min(prefill):>6.1f} "
                      f"({q['prefill_tps'] / statistics.median(prefill):>5.2f}x)"
                      f"   {statistics.median(decode):>8.1f} / {min(decode):>6.1f} "
                      f"({q['decode_tps'] / statistics.median(decode):>5.2f}x)")
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
