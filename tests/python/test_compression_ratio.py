"""`--compression-ratio R` keeps int(n * (1 - R)) tokens of an n-token prompt, as kvpress computes it (issue 36,
item 2), everywhere a budget is accepted, and the run records which was given.

The expected counts are computed here, in Python, with kvpress's own expression; kvscope's count is read back from
the trace (`budget_tokens`) that an independent reader (h5py) opens. The prompts are chosen so that kvpress's
truncation and a share's rounding to the nearest token differ.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable.
"""
import json
import os
import subprocess
import sys

import h5py

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY", "")
WORDS = ("the lighthouse keeper climbed the stair and wound the clock before the storm came in from the grey sea "
         "while gulls circled over the harbour and the boats pulled hard for home").split()


def kvscope(*args, timeout=600):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)


def attr(run, name):
    value = run.attrs[name]
    return value.decode() if isinstance(value, bytes) else value


def traced(root, name, prompt, *budget_args):
    out = os.path.join(root, name + ".h5")
    res = kvscope("trace", "--prompt", prompt, "--policy", "streaming_llm", "--max-new-tokens", "1",
                  "--record", "attention=off;similarity=off;decode=off;stats=off", *budget_args, "--out", out)
    check(res.returncode == 0, f"trace {budget_args} exits 0 ({res.stderr.strip()[-300:]})")
    if res.returncode != 0:
        return None
    with h5py.File(out, "r") as f:
        run = f["runs"][list(f["runs"])[0]]
        return int(run.attrs["prompt_length"]), attr(run, "budget"), int(attr(run, "budget_tokens")), list(f["runs"])[0]


def test_kvpress_count(root):
    cases = 0
    for words in range(12, 60):
        prompt = " ".join(WORDS[i % len(WORDS)] for i in range(words))
        for ratio in ("0.25", "0.8"):
            got = traced(root, f"w{words}_{ratio}", prompt, "--compression-ratio", ratio)
            if got is None:
                return
            n, budget, tokens, run_name = got
            kvpress = int(n * (1 - float(ratio)))  # kvpress: int(k_len * (1 - self.compression_ratio))
            nearest = round(n * (1 - float(ratio)) + 1e-9)
            if kvpress == nearest and cases > 0:
                continue  # only prompts where the two rules differ, after the first
            cases += 1
            check(tokens == kvpress, f"{n} tokens at ratio {ratio}: keeps int(n * (1 - R)) = {kvpress} ({tokens})")
            check(budget == "cr:" + ratio, f"the run records the ratio as its budget ('{budget}')")
            check(run_name == f"streaming_llm_bcr_{ratio}", f"and its name says so ({run_name})")
            share = traced(root, f"s{words}_{ratio}", prompt, "--budget",
                           f"{round((1 - float(ratio)) * 100)}%")
            if share is not None:
                check(share[2] == round(n * (1 - float(ratio)) + 1e-9),
                      f"--budget {round((1 - float(ratio)) * 100)}% rounds to the nearest token ({share[2]})")
        if cases >= 4:
            break
    check(cases >= 4, f"found prompts where truncation and rounding differ ({cases})")


def test_everywhere(root):
    res = kvscope("generate", "--prompt", "a b c d e f g h", "--policy", "h2o", "--budget", "50%",
                  "--compression-ratio", "0.5", "--max-new-tokens", "1")
    check(res.returncode == 2 and "--compression-ratio" in res.stderr and "--budget" in res.stderr,
          f"--budget and --compression-ratio together are refused naming both ({res.stderr.strip()[-200:]})")
    for ratio in ("1", "-0.2", "x"):
        res = kvscope("generate", "--prompt", "a b c d", "--policy", "h2o", "--compression-ratio", ratio,
                      "--max-new-tokens", "1")
        check(res.returncode == 2 and "compression ratio" in res.stderr and "[0, 1)" in res.stderr,
              f"--compression-ratio {ratio} is refused naming the range ({res.stderr.strip()[-200:]})")
    res = kvscope("eval", "fidelity", "--prompt", " ".join(WORDS), "--policy", "snapkv", "--compression-ratio", "0.5",
                  "--max-new-tokens", "2", "--json")
    check(res.returncode == 0 and json.loads(res.stdout).get("budget") == "cr:0.5",
          f"eval fidelity takes it and records budget cr:0.5 ({res.stderr.strip()[-200:]})")
    out = os.path.join(root, "sweep")
    res = kvscope("sweep", "--out", out, "--eval", "fidelity", "--max-new-tokens", "2", "--policies", "h2o",
                  "--compression-ratios", "0.5,0.75", "--budgets", "25%", "--prompt", " ".join(WORDS))
    grid = json.load(open(os.path.join(out, "grid.json"))) if res.returncode == 0 else {}
    check(grid.get("budgets") == ["25%", "cr:0.5", "cr:0.75"],
          f"sweep --compression-ratios adds cr: budgets to --budgets ({grid.get('budgets')}, {res.stderr.strip()[-200:]})")
    res = kvscope("sweep", "--out", os.path.join(root, "none"), "--eval", "fidelity", "--policies", "h2o",
                  "--prompt", "a b c")
    check(res.returncode == 2 and "--compression-ratios" in res.stderr,
          f"a sweep without budgets names both options ({res.stderr.strip()[-200:]})")


def main(root):
    test_kvpress_count(root)
    test_everywhere(root)


if __name__ == "__main__":
    sys.exit(run_in_temp_folder(BINARY, "kvscope_compression_ratio_", main))
