#!/usr/bin/env python3
"""Mutation test of kvscope's file readers, run as separate processes, so that a crash is seen as a crash.

--format trace: damaged copies of a real trace go to `kvscope inspect`, `kvscope figure` and the window
  (`kvscope gui --script`: open a good trace, then the damaged one, then export a figure of the good run).
--format gguf: damaged copies of a tiny Llama GGUF (tiny_gguf.py: the default model's tokenizer, one small
  layer) go to `kvscope generate --max-new-tokens 2`, so an accepted mutant must also generate. Most
  edits land in the header, metadata and tensor table (before the tensor data).
--format safetensors: a tiny Hugging Face folder (tests/fixtures/hf_synthetic/llama3, or --base FOLDER) whose
  model.safetensors has a damaged 8-byte header length or JSON header (the tensor data is left alone, apart
  from truncation), into `kvscope generate --model FOLDER --max-new-tokens 2`. Half the edits are byte-level,
  the rest rewrite the header: a tensor's dtype, shape or data_offsets, deleted or renamed entries, values of
  the wrong type, deep nesting (the header is padded back to its length, so the data stays where it was).
--format tokenizer: the same folder with a damaged tokenizer.json, into the same command: byte-level edits
  as above, and structure-aware ones (a key deleted, a value of another type, huge or negative numbers, the
  text cut after a JSON token, deeply nested arrays, broken merges, vocabulary ids out of range or
  duplicated, added tokens, the split regex, ...).

Every exit is classified:
    clean    exit 1 or 2 with a "kvscope...: error:" message and no sanitizer report
    success  exit 0 (the damage hit data or padding, or the reader skipped an incomplete part)
    crash    killed by a signal, a sanitizer report, or any other exit
    hang     still running at the time limit

Every command runs with its own copy of the mutant (a hard link) and a tag in its environment. Two seconds after
it returned or was killed at the time limit, any process still alive that names that copy on its command line
(e.g. a `__probe-trace` child) or is the kvscope executable carrying the tag is a leftover: it is counted,
reported with its command line, and killed. The processes are listed in batches (one pass over /proc for
every command due), so the check does not slow the mutants down. The window's Xvfb must be gone at the end.

Exits 1 when any crash, hang or leftover process was seen (their mutants are kept in --keep), 0 otherwise.

    tests/fuzz/mutation_harness.py --kvscope build/app/kvscope --format trace --mode quick  # in make test
    tests/fuzz/mutation_harness.py --kvscope build/app/kvscope --format trace --mode long   # >= 10 000
    tests/fuzz/mutation_harness.py --kvscope build/app/kvscope --format gguf --mode long
    tests/fuzz/mutation_harness.py --kvscope build/app/kvscope --format safetensors --mode quick   # by hand only
    tests/fuzz/mutation_harness.py --kvscope build/app/kvscope --format tokenizer --mode long      # bench/fuzz_long.sh

Mutations follow issue 15's reproduction: random bytes anywhere, 8-byte runs of 0x00 or 0xff, truncation,
4 random bytes in the first 8 KiB (the HDF5 superblock and root group, the GGUF header), plus boundary
values over 4- or 8-byte fields. Seeded: the same --seed gives the same mutants.
"""
import argparse
import concurrent.futures
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = {  # mutants per format; for traces, inspect and figure get every mutant, the window a share (it starts slowly)
    "quick": {"trace": 200, "gui": 8, "gguf": 100},
    "long": {"trace": 10000, "gui": 300, "gguf": 10000},
}
INTERESTING = [0, 1, 2, 7, 8, 255, 256, 4096, 65535, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32, 1 << 62, (1 << 64) - 1]
PROMPT = ("The keeper wrote the weather in his log every night: wind, swell and ships. The key was under the "
          "seventh step of the lighthouse stair. Where was the key?")


def mutate(data: bytes, rng: random.Random, region: int) -> bytes:
    """One damaged copy; edits land in the first `region` bytes (GGUF: before the tensor data) except for
    truncation, which can cut anywhere."""
    b = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0:  # random bytes
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(region)] = rng.randrange(256)
    elif kind == 1:  # an 8-byte run of 0x00 or 0xff
        at = rng.randrange(region - 8)
        b[at:at + 8] = bytes([rng.choice([0x00, 0xFF])]) * 8
    elif kind == 2:  # truncation
        del b[rng.randrange(1, len(b)):]
    elif kind == 3:  # 4 random bytes in the first 8 KiB
        for _ in range(4):
            b[rng.randrange(min(8192, region))] = rng.randrange(256)
    else:  # a boundary value over a 4- or 8-byte field, little endian as HDF5 and GGUF store them
        width = rng.choice([4, 8])
        at = rng.randrange(region - width)
        b[at:at + width] = (rng.choice(INTERESTING) & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return bytes(b)


def classify(returncode, stderr: str, timed_out: bool) -> str:
    if timed_out:
        return "hang"
    if "Sanitizer" in stderr or "runtime error:" in stderr:
        return "crash"
    if returncode == 0:
        return "success"
    if returncode in (1, 2) and ": error:" in stderr:
        return "clean"
    return "crash"


def classify_window(returncode, stderr: str, timed_out: bool, exported: bool) -> str:
    """The window must finish its script and export the good run whatever the damaged file did; a refused
    file shows as an error in its log (echoed on stderr)."""
    if timed_out:
        return "hang"
    if returncode != 0 or not exported or "Sanitizer" in stderr or "runtime error:" in stderr:
        return "crash"
    return "clean" if "error" in stderr else "success"


def run(cmd, timeout, env):
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout, env=env)
        return res.returncode, res.stderr, False
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, err, True


class Xvfb:
    """One virtual display for every window of the run (a server per mutant would cost a second each)."""

    def __init__(self):
        self.proc = None
        for n in range(90, 140):
            if os.path.exists(f"/tmp/.X11-unix/X{n}") or os.path.exists(f"/tmp/.X{n}-lock"):
                continue
            self.proc = subprocess.Popen(["Xvfb", f":{n}", "-screen", "0", "800x600x24", "-nolisten", "tcp"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(100):
                if os.path.exists(f"/tmp/.X11-unix/X{n}"):
                    self.display = f":{n}"
                    return
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
            self.close()
        raise RuntimeError("could not start Xvfb")

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


def make_base_trace(kvscope, work, env):
    base = os.path.join(work, "base.h5")
    cmd = [kvscope, "trace", "--prompt", PROMPT, "--policy", "h2o", "--budget", "50%", "--max-new-tokens", "3",
           "--out", base]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"cannot make the base trace: {' '.join(cmd)}\n{res.stderr}")
    return base


def default_model():
    return os.environ.get("KVSCOPE_MODEL") or os.path.join(ROOT, ".deps", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


class TraceTargets:
    """inspect and figure on every mutant; the window on the first n_gui."""

    suffix = ".h5"

    def __init__(self, args, work, env):
        self.kvscope, self.work, self.env, self.n_gui = args.kvscope, work, env, args.n_gui
        base = args.base or make_base_trace(args.kvscope, work, env)
        self.data = open(base, "rb").read()
        self.region = len(self.data)
        self.good = os.path.join(work, "good.h5")
        shutil.copy(base, self.good)
        self.xvfb = None
        if self.n_gui > 0:
            if shutil.which("Xvfb") is None:
                print("mutation: Xvfb not installed, window runs skipped")
                self.n_gui = 0
            else:
                self.xvfb = Xvfb()

    def close(self):
        if self.xvfb:
            self.xvfb.close()

    def runs(self, i, mutant):
        """(target, command, environment, path the run must produce or None)."""
        png = os.path.join(self.work, f"fig_{i}.png")
        out = [("inspect", [self.kvscope, "inspect", mutant], self.env, None),
               ("figure", [self.kvscope, "figure", mutant, "--view", "attention", "--out", png, "--size", "320x240"],
                self.env, None)]
        if i < self.n_gui:
            script = os.path.join(self.work, f"script_{i}.kvs")
            export = os.path.join(self.work, f"gui_{i}.png")
            with open(script, "w") as f:
                # The good run is open first, so it is the active one; it must survive the damaged file.
                f.write(f"open {self.good}\nwait 300\nopen {mutant}\nwait 300\nframes 2\n"
                        f"export attention {export} 320x240\nquit\n")
            out.append(("gui", [self.kvscope, "gui", "--no-run", "--width", "640", "--height", "480", "--script", script],
                        # Mesa's software GL driver leaks and is unloaded first (as in tests/e2e/gui_e2e_test.sh).
                        dict(self.env, DISPLAY=self.xvfb.display, ASAN_OPTIONS="detect_leaks=0"), export))
        return out


class GgufTargets:
    """`kvscope generate` of two tokens on every mutant of the tiny model."""

    suffix = ".gguf"

    def __init__(self, args, work, env):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from tiny_gguf import make_tiny_gguf
        base = args.base or os.path.join(work, "tiny.gguf")
        if not args.base:
            self.region = make_tiny_gguf(default_model(), base)
        else:
            from gguf import GGUFReader
            self.region = GGUFReader(base).data_offset
        self.data = open(base, "rb").read()
        self.kvscope, self.env = args.kvscope, env
        res = subprocess.run(self.command(base), capture_output=True, text=True, env=env)
        if res.returncode != 0:
            sys.exit(f"the unmutated tiny model does not generate: {res.stderr}")

    def command(self, model):
        return [self.kvscope, "generate", "--model", model, "--prompt", "The key was under the", "--max-new-tokens", "2",
                "--threads", "1"]

    def close(self):
        pass

    def runs(self, i, mutant):
        return [("generate", self.command(mutant), self.env, None)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvscope", default=os.environ.get("KVSCOPE_BINARY", os.path.join(ROOT, "build", "app", "kvscope")))
    ap.add_argument("--format", choices=["trace", "gguf"], default="trace")
    ap.add_argument("--mode", choices=sorted(MODES), default="quick")
    ap.add_argument("--mutants", type=int, help="override the mode's count")
    ap.add_argument("--gui-mutants", type=int, help="traces: override the mode's count for the window (0: none)")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a run counts as a hang")
    ap.add_argument("--base", help="mutate this file instead of making a small trace or the tiny model")
    ap.add_argument("--keep", default=os.path.join(tempfile.gettempdir(), "kvscope_mutation_failures"),
                    help="folder for mutants that crashed or hung")
    ap.add_argument("--json", help="write the counts here")
    args = ap.parse_args()
    n_mutants = args.mutants if args.mutants is not None else MODES[args.mode][args.format]
    args.n_gui = args.gui_mutants if args.gui_mutants is not None else MODES[args.mode]["gui"]

    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    work = tempfile.mkdtemp(prefix="kvscope_mutation_")
    targets = None
    counts = {}

    def stop(signum, _frame):  # ctest's timeout or Ctrl-C: leave no Xvfb and no mutants behind
        if targets:
            targets.close()
        shutil.rmtree(work, ignore_errors=True)
        print(f"{args.format} mutation: stopped by signal {signum}; counts so far: {counts}", flush=True)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        targets = (TraceTargets if args.format == "trace" else GgufTargets)(args, work, env)

        def one(i):
            rng = random.Random(args.seed * 1_000_003 + i)
            mutant = os.path.join(work, f"mutant_{i}{targets.suffix}")
            with open(mutant, "wb") as f:
                f.write(mutate(targets.data, rng, targets.region))
            outcomes = {}
            made = []
            for target, cmd, run_env, product in targets.runs(i, mutant):
                code, err, timed_out = run(cmd, args.timeout, run_env)
                if product:
                    verdict = classify_window(code, err, timed_out, os.path.exists(product))
                    made.append(product)
                else:
                    verdict = classify(code, err, timed_out)
                outcomes[target] = verdict
                if verdict in ("crash", "hang"):
                    os.makedirs(args.keep, exist_ok=True)
                    kept = os.path.join(args.keep, f"{args.format}_seed{args.seed}_mutant{i}{targets.suffix}")
                    shutil.copy(mutant, kept)
                    print(f"{verdict.upper()}: {target} on {kept} (exit {code}): {err.strip()[-600:]}", flush=True)
            for p in [mutant, os.path.join(work, f"fig_{i}.png"), *made]:
                if os.path.exists(p):
                    os.remove(p)
            return outcomes

        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for done, outcomes in enumerate(pool.map(one, range(n_mutants)), 1):
                for target, verdict in outcomes.items():
                    c = counts.setdefault(target, {"mutants": 0, "clean": 0, "success": 0, "crash": 0, "hang": 0})
                    c["mutants"] += 1
                    c[verdict] += 1
                if done % 500 == 0:  # long runs: the counts so far survive an interrupted run
                    print(f"{args.format} mutation: {done}/{n_mutants} after {time.time() - t0:.0f} s: {counts}", flush=True)
        elapsed = time.time() - t0
    finally:
        if targets:
            targets.close()
        shutil.rmtree(work, ignore_errors=True)

    for target, c in counts.items():
        print(f"{args.format} mutation [{target}]: {c['mutants']} mutants: {c['clean']} clean errors, "
              f"{c['success']} succeeded, {c['crash']} crashes, {c['hang']} hangs")
    print(f"{args.format} mutation: seed {args.seed}, {elapsed:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"format": args.format, "seed": args.seed, "seconds": elapsed, "targets": counts}, f, indent=2)
    bad = sum(c["crash"] + c["hang"] for c in counts.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
