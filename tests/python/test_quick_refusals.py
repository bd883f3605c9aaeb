"""Refusals that name what was wrong and come quickly (issue 34, item 9), on the default model:

- `generate --json` with a prompt file that is not UTF-8 is refused before the run, naming the file and the byte
  (it failed after generating, with nlohmann's bare type_error.316); a messages file likewise;
- a count option of 0 says what it expects (CLI11 printed the largest double in 309 digits);
- `eval longbench --score-only --metric classification` without class names is refused (it scored 0 silently);
- `generate --messages` far over the context is refused in < 2 s (200,000 messages took 49 s): by the count of
  messages, and, for fewer but long messages, by the tokens of the text's first bytes;
- `sweep --ray` at an address where nothing listens is refused in < 15 s (Ray retried for over 100 s);
- `eval ruler --samples 1000000` is refused at once (memory grew by ~10 MB/s with no progress).

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable.
"""
import json
import os
import re
import subprocess
import sys
import time

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY", "")


def kvscope(*args, timeout=120):
    start = time.monotonic()
    res = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)
    return res, time.monotonic() - start


def conversation(path, n, words=3):
    with open(path, "w") as f:
        json.dump([{"role": "user" if i % 2 == 0 else "assistant", "content": " ".join(["hello there"] * words) + f" {i}"}
                   for i in range(n)], f)
    return path


def all_checks(root):
    latin1 = os.path.join(root, "latin1.txt")
    with open(latin1, "wb") as f:
        f.write(b"The caf\xe9 on the corner")
    res, seconds = kvscope("generate", "--json", "--prompt-file", latin1, "--max-new-tokens", "2")
    check(res.returncode == 2 and "latin1.txt" in res.stderr and "byte 7 (0xE9)" in res.stderr and not res.stdout
          and "type_error" not in res.stderr,
          f"generate --json: a prompt file that is not UTF-8 is refused naming the file and byte ({res.stderr.strip()})")
    messages = os.path.join(root, "messages.json")
    with open(messages, "wb") as f:
        f.write(b'[{"role": "user", "content": "caf\xe9"}]')
    res, _ = kvscope("generate", "--messages", messages, "--max-new-tokens", "2")
    check(res.returncode == 2 and "messages.json" in res.stderr and "byte 33 (0xE9)" in res.stderr,
          f"a messages file that is not UTF-8 is refused naming the file and byte ({res.stderr.strip()})")

    for args, expected in ((["eval", "ruler", "--samples", "0"], "not in range 1 to 1000"),
                           (["eval", "fidelity", "--prompt", "x", "--max-new-tokens", "0"], "0 is not positive"),
                           (["generate", "--prompt", "x", "--top-k", "-1"], "-1 is negative")):
        res, _ = kvscope(*args)
        longest = max((len(d) for d in re.findall(r"\d+", res.stderr)), default=0)
        check(res.returncode == 2 and expected in res.stderr and longest < 12,
              f"{' '.join(args)}: refused saying '{expected}', no 309-digit number ({res.stderr.strip()[:200]})")

    pairs = json.dumps([["the answer is sports", "sports"]])
    res, _ = kvscope("eval", "longbench", "--score-only", "--metric", "classification", "--pairs", pairs)
    check(res.returncode == 2 and "classification" in res.stderr and "--classes" in res.stderr,
          f"classification without class names is refused ({res.stderr.strip()})")
    res, _ = kvscope("eval", "longbench", "--score-only", "--metric", "classification", "--pairs", pairs,
                     "--classes", json.dumps(["sports", "politics"]), "--json")
    check(res.returncode == 0 and json.loads(res.stdout or "{}").get("scores") == [1.0],
          f"with --classes it scores the prediction ({res.stdout.strip()} {res.stderr.strip()[-200:]})")

    for n, words, what in ((200_000, 1, "messages cannot fit"), (5_000, 4, "are already")):
        path = conversation(os.path.join(root, f"conversation_{n}.json"), n, words)
        res, seconds = kvscope("generate", "--messages", path, "--max-new-tokens", "2")
        check(res.returncode == 2 and what in res.stderr and "context" in res.stderr and seconds < 2.0,
              f"{n:,} messages over the context refused in {seconds:.2f} s (< 2 s) ({res.stderr.strip()[-200:]})")

    res, seconds = kvscope("sweep", "--out", os.path.join(root, "ray"), "--policies", "full", "--budgets", "50%",
                           "--eval", "fidelity", "--max-new-tokens", "2", "--prompt", "x", "--ray", "127.0.0.1:1",
                           "--ray-python", sys.executable)
    check(res.returncode != 0 and "cannot reach the Ray cluster" in res.stderr and "127.0.0.1:1" in res.stderr
          and seconds < 15.0, f"an unreachable --ray address is refused in {seconds:.1f} s (< 15 s) "
          f"({res.stderr.strip()[-300:]})")

    for args in (["eval", "ruler", "--samples", "1000000", "--length", "8192"],
                 ["sweep", "--eval", "ruler", "--samples", "5000", "--policies", "full", "--budgets", "50%",
                  "--out", os.path.join(root, "ruler")]):
        res, seconds = kvscope(*args)
        check(res.returncode == 2 and "--samples" in res.stderr and "1000" in res.stderr and seconds < 5.0,
              f"{' '.join(args[:2])} with absurd --samples refused at once ({seconds:.1f} s: {res.stderr.strip()[:200]})")


def main():
    return run_in_temp_folder(BINARY, "kvscope_quick_refusals_", all_checks)


if __name__ == "__main__":
    sys.exit(main())
