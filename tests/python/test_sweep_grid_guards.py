"""`kvscope sweep`: what makes a sweep folder mean one grid (issue 34).

- grid.json records each policy file's SHA-256; resuming after the file changed is refused naming it, the folder
  untouched (the rows would mix two scorers under one name);
- an empty rows.csv, or one with a torn header (a full disk while the header was written), is a new one: the
  sweep runs and then resumes;
- a policy or budget given twice is refused (every cell would run twice and `n` double);
- --no-parse-special is honoured (the same KL as `eval fidelity --no-parse-special`, another than without it, part
  of the grid), and an option another kind of sweep reads is refused, as `kvscope eval KIND` refuses it;
- a row whose labels contradict its cell index is refused on load, naming the line.

Run by ctest with the project venv; KVSCOPE_BINARY points at the kvscope executable.
"""
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY", "")
ROOT = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PROMPT = "The lighthouse keeper climbed the stair, wound the clock and lit the lamp before the storm came in."
# Special-token text in a plain prompt: parsed, it is one token; with --no-parse-special, plain text.
SPECIAL_PROMPT = "<|im_start|>user The lighthouse keeper<|im_end|> climbed the stair<|im_start|> and lit the lamp."
SMALL = ["--eval", "fidelity", "--max-new-tokens", "3", "--budgets", "50%"]


def kvscope(*args, timeout=600):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)


def rows_of(out):
    with open(os.path.join(out, "rows.csv"), newline="") as f:
        return list(csv.DictReader(f))


def snapshot(out):
    return {n: open(os.path.join(out, n), "rb").read() for n in sorted(os.listdir(out))}


def test_policy_file_digest(root):
    policy = os.path.join(root, "scorer.py")
    shutil.copy(os.path.join(ROOT, "examples", "policies", "key_norm.py"), policy)
    out = os.path.join(root, "policy_file")
    grid = ["sweep", "--out", out, "--policies", f"python:{policy},full", *SMALL, "--prompt", PROMPT]
    res = kvscope(*grid)
    check(res.returncode == 0, f"a sweep of a python: policy runs ({res.stderr.strip()[-300:]})")
    if res.returncode != 0:
        return
    digest = hashlib.sha256(open(policy, "rb").read()).hexdigest()
    recorded = json.load(open(os.path.join(out, "grid.json"))).get("policy_sha256")
    check(recorded == [digest, ""], f"grid.json records the file's SHA-256, '' for the built-in ({recorded})")
    with open(policy, "a") as f:
        f.write("\n\ndef score(obs):\n    return (obs.keys.astype('float64') ** 2).sum(axis=-1)\n")
    before = snapshot(out)
    res = kvscope(*grid)
    check(res.returncode == 2 and "scorer.py" in res.stderr and digest in res.stderr,
          f"resuming after the policy file changed is refused naming it ({res.stderr.strip()[-300:]})")
    check(snapshot(out) == before, "and the sweep folder is untouched")
    # A sweep of built-ins records no digests, so its grid.json is what it was before the field existed.
    out = os.path.join(root, "builtins")
    res = kvscope("sweep", "--out", out, "--policies", "full", *SMALL, "--prompt", PROMPT)
    check(res.returncode == 0 and "policy_sha256" not in json.load(open(os.path.join(out, "grid.json"))),
          f"a grid of built-ins has no policy_sha256 ({res.stderr.strip()[-200:]})")
    return out


def test_empty_rows_csv(root, finished):
    """`finished`: a finished one-cell sweep folder."""
    if not finished:
        return
    expected = rows_of(finished)
    for name, content in (("empty", b""), ("torn header", b"cell,prompt,pol")):
        out = os.path.join(root, "empty_" + name.replace(" ", "_"))
        shutil.copytree(finished, out)
        with open(os.path.join(out, "rows.csv"), "wb") as f:
            f.write(content)
        res = kvscope("sweep", "--out", out, "--policies", "full", *SMALL, "--prompt", PROMPT)
        check(res.returncode == 0 and "0 done, 1 to run" in res.stderr,
              f"a {name} rows.csv is a new one: the cell runs ({res.returncode}: {res.stderr.strip()[-300:]})")
        rows = rows_of(out)
        check(len(rows) == 1 and rows[0]["policy"] == "full" and rows[0]["kl_mean"] == expected[0]["kl_mean"],
              f"{name}: rows.csv has its header and the one row again ({rows})")
        res = kvscope("sweep", "--out", out, "--policies", "full", *SMALL, "--prompt", PROMPT)
        check(res.returncode == 0 and "1 done, 0 to run" in res.stderr,
              f"{name}: and the sweep resumes afterwards ({res.stderr.strip()[-300:]})")


def test_duplicates(root):
    for flag, value, word in (("--policies", "full,h2o,full", "'full' twice"),
                              ("--policies", "snapkv:window=8,snapkv:window=8.0", "(as 'snapkv:window=8' too)"),
                              ("--budgets", "50%,25%,50%", "'50%' twice")):
        out = os.path.join(root, "duplicates")
        args = ["--policies", "full,h2o", "--budgets", "50%"]
        args[args.index(flag) + 1] = value
        res = kvscope("sweep", "--out", out, "--eval", "fidelity", "--max-new-tokens", "3", *args, "--prompt", PROMPT)
        check(res.returncode == 2 and word in res.stderr and not os.path.exists(out),
              f"{flag} {value} is refused naming the duplicate, nothing created ({res.stderr.strip()[-300:]})")


def test_options_of_eval(root):
    def kl(out, *extra):
        res = kvscope("sweep", "--out", out, "--policies", "streaming_llm", *SMALL, "--prompt", SPECIAL_PROMPT, *extra)
        check(res.returncode == 0, f"sweep {extra} exits 0 ({res.stderr.strip()[-300:]})")
        return float(rows_of(out)[0]["kl_mean"]) if res.returncode == 0 else None

    parsed = kl(os.path.join(root, "parsed"))
    plain = kl(os.path.join(root, "plain"), "--no-parse-special")
    res = kvscope("eval", "fidelity", "--policy", "streaming_llm", "--budget", "50%", "--max-new-tokens", "3",
                  "--prompt", SPECIAL_PROMPT, "--no-parse-special", "--json")
    reference = json.loads(res.stdout)["metrics"]["kl_mean"] if res.returncode == 0 else None
    check(plain is not None and reference is not None and abs(plain - reference) <= 1e-12,
          f"sweep --no-parse-special gives eval fidelity --no-parse-special's KL ({plain} vs {reference})")
    check(parsed is not None and plain is not None and parsed != plain,
          f"and another KL than without it ({parsed} vs {plain})")
    res = kvscope("sweep", "--out", os.path.join(root, "parsed"), "--policies", "streaming_llm", *SMALL, "--prompt",
                  SPECIAL_PROMPT, "--no-parse-special")
    check(res.returncode == 2 and "parse_special" in res.stderr,
          f"--no-parse-special is part of the grid: resuming with it is refused ({res.stderr.strip()[-200:]})")

    # An option another kind of sweep reads (and `kvscope eval` of this kind refuses) is refused.
    for kind, option in (("needle", ["--no-parse-special"]), ("needle", ["--chat"]), ("ruler", ["--chat-template", "x"]),
                         ("fidelity", ["--prompt-tokens", "4"]), ("ppl", ["--max-new-tokens", "4"]),
                         ("fidelity", ["--seed", "3"]), ("ppl", ["--samples", "2"]), ("fidelity", ["--no-chat"])):
        out = os.path.join(root, "refused")
        prompt = ["--prompt", PROMPT] if kind in ("fidelity", "ppl") else []
        res = kvscope("sweep", "--out", out, "--eval", kind, "--policies", "full", "--budgets", "50%", *prompt, *option)
        check(res.returncode == 2 and option[0] in res.stderr and f"{kind} sweep" in res.stderr and not os.path.exists(out),
              f"sweep --eval {kind} {option[0]} is refused naming the option ({res.stderr.strip()[-300:]})")


def test_contradicting_row(root):
    out = os.path.join(root, "labels")
    res = kvscope("sweep", "--out", out, "--policies", "full,streaming_llm", *SMALL, "--prompt", PROMPT)
    check(res.returncode == 0, f"a two-cell sweep runs ({res.stderr.strip()[-300:]})")
    if res.returncode != 0:
        return
    path = os.path.join(out, "rows.csv")
    text = open(path).read()
    swapped = text.replace(",full,", ",@@,").replace(",streaming_llm,", ",full,").replace(",@@,", ",streaming_llm,")
    check(swapped != text, "the two rows' policy labels are swapped")
    with open(path, "w") as f:
        f.write(swapped)
    before = snapshot(out)
    res = kvscope("sweep", "--out", out, "--policies", "full,streaming_llm", *SMALL, "--prompt", PROMPT)
    check(res.returncode == 1 and "rows.csv' line 2" in res.stderr and "grid says" in res.stderr,
          f"a row whose labels contradict its cell is refused naming the line ({res.stderr.strip()[-300:]})")
    check(snapshot(out) == before, "and nothing is rewritten")


def all_checks(root):
    finished = test_policy_file_digest(root)
    test_empty_rows_csv(root, finished)
    test_duplicates(root)
    test_options_of_eval(root)
    test_contradicting_row(root)


def main():
    return run_in_temp_folder(BINARY, "kvscope_sweep_guards_", all_checks)


if __name__ == "__main__":
    sys.exit(main())
