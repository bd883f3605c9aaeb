"""Every file kvscope writes goes through one writer (issue 34): never through a link planted where its temporary
file would go, never over an existing file without --force, never over one of the command's own inputs, and a
failed, killed or concurrent run leaves the previous file byte for byte and no temporary file.

Through the real executable: `figure --out`, `trace --out`, `eval longbench --predictions` and `eval ruler
--write-samples`. A victim file stands where a planted link points; its SHA-256 must not change.
"""
import glob
import hashlib
import os
import subprocess
import sys
import time

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY", "")
SOURCE = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
RECORDS = os.path.join(SOURCE, "tests", "fixtures", "longbench", "synthetic.jsonl")
PROMPT = "A short prompt about lamps."


def kvscope(*args, timeout=900):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=timeout)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def temporaries(path):
    """What a writer of PATH may leave while it runs: its private folder, and any old-style partial file."""
    folder, name = os.path.split(path)
    return glob.glob(os.path.join(folder, f".{name}.kvscope-*")) + glob.glob(path + ".partial")


def plant_links(path, victim):
    """Links at every temporary name a writer of PATH could predict, all pointing at the victim."""
    folder, name = os.path.split(path)
    planted = [path + ".partial", path + ".tmp", os.path.join(folder, f".{name}.tmp"),
               os.path.join(folder, f".{name}.kvscope-XXXXXX.tmp")]
    for p in planted:
        os.symlink(victim, p)
    return planted


def remove(paths):
    for p in paths:
        if os.path.lexists(p):
            os.remove(p)


def make_victim(tmp, name="victim.h5"):
    victim = os.path.join(tmp, name)
    with open(victim, "wb") as f:
        f.write(b"the victim's own bytes\n" * 100)
    return victim, sha256(victim)


def links_not_followed(tmp, good):
    victim, digest = make_victim(tmp)
    fig = os.path.join(tmp, "fig.png")
    planted = plant_links(fig, victim)
    res = kvscope("figure", good, "--view", "attention", "--out", fig)
    check(res.returncode == 0, f"figure writes beside planted links ({res.stderr.strip()[-300:]})")
    check(sha256(victim) == digest, "figure: the victim behind fig.png.partial (and other guessable names) is unchanged")
    check(os.path.isfile(fig) and not os.path.islink(fig), "figure: fig.png is a regular file, not a link")
    check(all(os.path.islink(p) for p in planted), "figure: the planted links are left as they were")
    remove(planted)

    out = os.path.join(tmp, "t.h5")
    planted = plant_links(out, victim)
    res = kvscope("trace", "--prompt", PROMPT, "--max-new-tokens", "2", "--quiet", "--out", out)
    check(res.returncode == 0, f"trace writes beside planted links ({res.stderr.strip()[-300:]})")
    check(sha256(victim) == digest, "trace: the victim behind t.h5.partial is unchanged")
    check(os.path.isfile(out) and not os.path.islink(out), "trace: t.h5 is a regular file, not a link")
    check(not temporaries(out) or all(os.path.islink(p) for p in temporaries(out)), "trace: no temporary left")
    remove(planted)

    # --force over a link at the target itself replaces the link, never the file it points to.
    link = os.path.join(tmp, "linked.png")
    os.symlink(victim, link)
    res = kvscope("figure", good, "--view", "attention", "--out", link)
    check(res.returncode != 0 and "already exists" in res.stderr and "--force" in res.stderr,
          f"figure refuses a link at --out without --force ({res.stderr.strip()[-200:]})")
    res = kvscope("figure", good, "--view", "attention", "--out", link, "--force")
    check(res.returncode == 0 and not os.path.islink(link) and os.path.getsize(link) > 1000,
          "figure --force replaces the link at --out with the figure")
    check(sha256(victim) == digest, "figure --force: the link's target is unchanged")


def existing_targets(tmp, good):
    fig = os.path.join(tmp, "existing.png")
    with open(fig, "wb") as f:
        f.write(b"an older figure")
    res = kvscope("figure", good, "--view", "attention", "--out", fig)
    check(res.returncode != 0 and fig in res.stderr and "already exists" in res.stderr and "--force" in res.stderr,
          f"figure refuses an existing --out, naming it and --force ({res.stderr.strip()[-200:]})")
    with open(fig, "rb") as f:
        check(f.read() == b"an older figure", "... and leaves it as it was")
    res = kvscope("figure", good, "--view", "attention", "--out", fig, "--force")
    with open(fig, "rb") as f:
        check(res.returncode == 0 and f.read(8) == b"\x89PNG\r\n\x1a\n", "figure --force replaces it with a PNG")
    res = kvscope("figure", good, "--view", "attention", "--out", good, "--force")
    check(res.returncode == 2 and "same file" in res.stderr and "trace" in res.stderr,
          f"figure --out over its own trace is refused ({res.returncode}: {res.stderr.strip()[-200:]})")
    check(not temporaries(fig) and not temporaries(good), "no temporary files are left")
    res = kvscope("eval", "needle", "--lengths", "256", "--depths", "50", "--figure", fig)
    check(res.returncode != 0 and "already exists" in res.stderr and "--force" in res.stderr,
          f"eval needle refuses an existing --figure without --force ({res.stderr.strip()[-200:]})")


def concurrent_traces(tmp):
    out = os.path.join(tmp, "same.h5")
    with open(out, "wb") as f:
        f.write(b"an older trace")
    args = [BINARY, "trace", "--prompt-file", os.path.join(SOURCE, "sample_data", "prompts_long", "lathe_manual.txt"),
            "--max-new-tokens", "4", "--out", out, "--force", "--quiet"]
    runs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(r.wait(timeout=900), r.stderr.read()) for r in runs]
    check(all(code == 0 for code, _ in results), f"two `trace --out SAME --force` at once both succeed ({results})")
    try:
        import h5py
    except ImportError:
        h5py = None
        print("h5py missing: reading with kvscope inspect only")
    if h5py:
        try:
            with h5py.File(out, "r") as f:
                runs = list(f["runs"])
                whole = len(runs) == 1 and f["runs"][runs[0]].attrs["complete"] == 1
        except Exception as e:  # a damaged file
            runs, whole = str(e), False
        check(whole, f"the file left at SAME is a whole trace h5py reads ({runs})")
    res = kvscope("inspect", out)
    check(res.returncode == 0 and "warning" not in res.stderr, f"kvscope inspect reads it ({res.stderr.strip()[-200:]})")
    check(not temporaries(out), f"no temporary files are left ({temporaries(out)})")


def failing_policy(tmp):
    path = os.path.join(tmp, "failing.py")
    with open(path, "w") as f:
        f.write("def score(obs):\n    raise RuntimeError('policy failure mid-run')\n")
    return path


def predictions(tmp):
    data = os.path.join(tmp, "records.jsonl")
    with open(RECORDS, "rb") as src, open(data, "wb") as dst:
        dst.write(src.read())
    digest = sha256(data)
    res = kvscope("eval", "longbench", "--data", data, "--limit", "1", "--predictions", data)
    check(res.returncode == 2 and "same file" in res.stderr and "--data" in res.stderr and "--predictions" in res.stderr,
          f"--data F --predictions F is refused naming both ({res.returncode}: {res.stderr.strip()[-200:]})")
    check(sha256(data) == digest, "... and F is unchanged")
    res = kvscope("eval", "longbench", "--data", data, "--limit", "1", "--predictions", data, "--force")
    check(res.returncode == 2 and sha256(data) == digest, "--force does not make an input an output")

    pred = os.path.join(tmp, "pred.jsonl")
    with open(pred, "w") as f:
        f.write('{"pred": "the previous run", "answers": ["x"], "all_classes": null, "length": 1}\n')
    previous = sha256(pred)
    res = kvscope("eval", "longbench", "--data", data, "--limit", "1", "--predictions", pred)
    check(res.returncode != 0 and "already exists" in res.stderr and "--force" in res.stderr and sha256(pred) == previous,
          f"an existing --predictions is refused without --force ({res.stderr.strip()[-200:]})")
    res = kvscope("eval", "longbench", "--data", data, "--limit", "2", "--predictions", pred, "--force",
                  "--policy", f"python:{failing_policy(tmp)}", "--budget", "50%")
    check(res.returncode != 0 and "policy failure mid-run" in res.stderr,
          f"a run whose policy fails exits non-zero ({res.returncode}: {res.stderr.strip()[-200:]})")
    check(sha256(pred) == previous and not temporaries(pred),
          "... leaving the previous --predictions byte for byte and no temporary file")

    victim, victim_digest = make_victim(tmp, "victim.jsonl")
    planted = plant_links(pred, victim)
    res = kvscope("eval", "longbench", "--data", data, "--limit", "2", "--predictions", pred, "--force")
    check(res.returncode == 0, f"eval longbench --predictions --force succeeds ({res.stderr.strip()[-200:]})")
    with open(pred) as f:
        lines = f.read().splitlines()
    check(len(lines) == 2 and sha256(victim) == victim_digest, "it writes both predictions, never through a planted link")
    remove(planted)

    # kill -9 mid-run: the previous file stays whole, and only the writer's hidden folder may be left.
    before = sha256(pred)
    mid = subprocess.Popen([BINARY, "eval", "longbench", "--data", data, "--predictions", pred, "--force", "--vs-full"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not temporaries(pred) and mid.poll() is None:
        time.sleep(0.02)
    time.sleep(0.3)
    mid.kill()
    mid.wait()
    check(sha256(pred) == before, "kill -9 of eval longbench mid-run leaves the previous --predictions byte for byte")
    left = temporaries(pred)
    check(all(os.path.basename(p).startswith(".pred.jsonl.kvscope-") and p.endswith(".tmp") for p in left),
          f"... and at most a hidden, clearly named temporary folder ({left})")
    for p in left:
        for name in os.listdir(p):
            os.remove(os.path.join(p, name))
        os.rmdir(p)


def samples(tmp):
    out = os.path.join(tmp, "samples.jsonl")
    with open(out, "w") as f:
        f.write('{"task": "vt", "index": 0}\n')
    previous = sha256(out)
    common = ["eval", "ruler", "--length", "512", "--samples", "1", "--tasks", "vt", "--write-samples", out]
    res = kvscope(*common)
    check(res.returncode != 0 and "already exists" in res.stderr and sha256(out) == previous,
          f"an existing --write-samples is refused without --force ({res.stderr.strip()[-200:]})")
    res = kvscope(*common, "--force", "--policy", f"python:{failing_policy(tmp)}", "--budget", "50%")
    check(res.returncode != 0 and sha256(out) == previous and not temporaries(out),
          f"a failed ruler run leaves the previous --write-samples byte for byte ({res.stderr.strip()[-200:]})")
    victim, digest = make_victim(tmp, "victim_samples.jsonl")
    planted = plant_links(out, victim)
    res = kvscope(*common, "--force")
    check(res.returncode == 0 and sha256(victim) == digest and sha256(out) != previous,
          f"--force writes the samples, never through a planted link ({res.stderr.strip()[-200:]})")
    remove(planted)
    haystack = os.path.join(tmp, "haystack.txt")
    with open(haystack, "w") as f:
        f.write("Grass is green. " * 200)
    digest = sha256(haystack)
    res = kvscope("eval", "ruler", "--length", "512", "--samples", "1", "--tasks", "vt", "--haystack", haystack,
                  "--write-samples", haystack, "--force")
    check(res.returncode == 2 and "same file" in res.stderr and sha256(haystack) == digest,
          "--write-samples over its --haystack is refused")


def all_checks(tmp):
    good = os.path.join(tmp, "good.h5")
    res = kvscope("trace", "--prompt", PROMPT, "--max-new-tokens", "2", "--quiet", "--out", good)
    check(res.returncode == 0, f"a good trace is written ({res.stderr.strip()})")
    links_not_followed(tmp, good)
    existing_targets(tmp, good)
    concurrent_traces(tmp)
    predictions(tmp)
    samples(tmp)


def main():
    return run_in_temp_folder(BINARY, "kvscope_safe_writes_", all_checks)


if __name__ == "__main__":
    sys.exit(main())
