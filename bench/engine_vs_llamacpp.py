#!/usr/bin/env python3
"""kvscope vs llama.cpp on the same GGUF, prompts and thread count, measured in one run.

Prints prefill tok/s, decode tok/s and peak RSS of each, and the ratios kvscope / llama.cpp.
Each engine runs in its own child process so its peak RSS is its own (os.wait4 rusage).
--cache-types runs kvscope once per KV cache type (llama.cpp's default cache is f16); --baseline adds another
kvscope binary (say, main's build before a change) measured in the same run, at its default settings.

usage: bench/engine_vs_llamacpp.py --kvscope build/app/kvscope --model M.gguf [--threads 2] [--repeats 3]
                                   [--cache-types f32,f16] [--baseline /path/to/other/kvscope]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

LLAMA_CHILD = r"""
import json, sys, time
from llama_cpp import Llama
model, prompt_file, threads, new_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
text = open(prompt_file, encoding="utf-8").read()
llm = Llama(model_path=model, n_ctx=4096, n_batch=2048, n_ubatch=2048, n_threads=threads,
            n_threads_batch=threads, verbose=False, logits_all=False)
tokens = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
t0 = time.perf_counter()
llm.eval(tokens)
t1 = time.perf_counter()
import numpy as np
generated = []
tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
t2 = time.perf_counter()
for _ in range(new_tokens - 1):
    generated.append(tok)
    llm.eval([tok])
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
t3 = time.perf_counter()
print(json.dumps({"prompt_tokens": len(tokens), "prefill_ms": (t1 - t0) * 1e3,
                  "decode_ms_per_token": (t3 - t2) * 1e3 / max(1, new_tokens - 1)}))
"""


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
    return out, usage.ru_maxrss / 1024.0


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
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="kvscope-bench-")
    child = os.path.join(tmp, "llama_child.py")
    with open(child, "w") as f:
        f.write(LLAMA_CHILD)
    print(f"threads {args.threads}, {args.new_tokens} new tokens, best of {args.repeats}, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'prompt':>7} {'engine':>12} {'tokens':>6} {'prefill tok/s':>14} {'decode tok/s':>13} {'peak RSS MiB':>13}")
    # (name, binary, extra arguments) of every kvscope variant; llama.cpp runs last.
    variants = [(f"kvscope-{t}", args.kvscope, ["--cache-type", t]) for t in args.cache_types.split(",") if t]
    if args.baseline:
        variants.append(("baseline", args.baseline, []))
    for length in [int(x) for x in args.lengths.split(",")]:
        prompt = os.path.join(tmp, f"prompt_{length}.txt")
        make_prompt(length, prompt)
        results = {}
        for engine, binary, extra in variants + [("llama.cpp", None, None)]:
            best = None
            for _ in range(args.repeats):
                out_path = os.path.join(tmp, "out.json")
                if binary:
                    argv = [binary, "generate", "--model", args.model, "--prompt-file", prompt, "--json",
                            "--ignore-eos", "--max-new-tokens", str(args.new_tokens), "--threads", str(args.threads)]
                    argv += extra + [out_path]
                    out, rss = measure(argv)
                    j = json.loads(out)
                    rec = {"prompt_tokens": len(j["prompt_tokens"]), "prefill_ms": j["timings"]["prefill_ms"],
                           "decode_ms_per_token": j["timings"]["decode_ms_per_token"]}
                else:
                    argv = [sys.executable, child, args.model, prompt, str(args.threads), str(args.new_tokens), out_path]
                    out, rss = measure(argv)
                    rec = json.loads(out)
                rec["rss"] = rss
                rec["prefill_tps"] = 1000.0 * rec["prompt_tokens"] / rec["prefill_ms"]
                rec["decode_tps"] = 1000.0 / rec["decode_ms_per_token"]
                if best is None or rec["prefill_tps"] + rec["decode_tps"] > best["prefill_tps"] + best["decode_tps"]:
                    best = rec
            results[engine] = best
            print(f"{length:>7} {engine:>12} {best['prompt_tokens']:>6} {best['prefill_tps']:>14.1f} "
                  f"{best['decode_tps']:>13.1f} {best['rss']:>13.1f}")
        l = results["llama.cpp"]
        for engine, _, _ in variants:
            k = results[engine]
            print(f"{length:>7} {'ratio ' + engine.replace('kvscope-', ''):>12} {'':>6} "
                  f"{k['prefill_tps'] / l['prefill_tps']:>14.2f} {k['decode_tps'] / l['decode_tps']:>13.2f} "
                  f"{k['rss'] / l['rss']:>13.2f}")


if __name__ == "__main__":
    main()
