"""Nothing left behind (issue 24): children kvscope starts die with it, a stalled trace probe is refused after a
limit that scales with the file, and refused or failed writes leave no file (and never replace a good one).

- A FIFO named like a trace makes the probe child block inside libhdf5's open() forever: a stand-in for a
  damaged file that makes the library loop. The parent (`kvscope inspect`) is killed with SIGKILL, SIGTERM
  and SIGINT while its child is stuck; the child must be gone within 2 s each time.
- The same for `kvscope sweep --workers 2`: its worker processes must die with it.
- KVSCOPE_PROBE_TIMEOUT=1 refuses the stalled file in about a second, naming the limit.
- `kvscope trace --force` over a good trace with a prompt longer than the context, or a policy that fails
  mid-run, exits non-zero and leaves the good trace byte for byte, with no temporary file beside it; kill -9
  of a trace mid-write leaves the previous file untouched too, and at most the writer's hidden folder.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from checks import FAILURES, check, passed

BINARY = os.environ.get("KVSCOPE_BINARY", "")
SOURCE = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def children_of(pid, marker):
    """Processes whose parent is `pid` and whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ppid == pid and marker in cmd:
            found.append(int(entry))
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for_children(proc, marker, count=1, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        kids = children_of(proc.pid, marker)
        if len(kids) >= count:
            return kids
        if proc.poll() is not None:
            return []
        time.sleep(0.05)
    return []


def gone_within(pids, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def probe_children_die_with_parent(tmp):
    fifo = os.path.join(tmp, "stalled.h5")
    os.mkfifo(fifo)
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
        parent = subprocess.Popen([BINARY, "inspect", fifo], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  env={**os.environ, "KVSCOPE_PROBE_TIMEOUT": "120"})
        kids = wait_for_children(parent, "__probe-trace")
        check(len(kids) == 1, f"inspect starts a probe child for the stalled file ({sig.name})")
        parent.send_signal(sig)
        parent.wait()
        check(gone_within(kids, 2.0), f"the stalled probe child is gone within 2 s of {sig.name} to its parent")
        for k in kids:  # never leave one behind, even when the check failed
            if alive(k):
                os.kill(k, signal.SIGKILL)


def stall_limit(tmp):
    fifo = os.path.join(tmp, "stalled_limit.h5")
    os.mkfifo(fifo)
    t0 = time.time()
    res = subprocess.run([BINARY, "inspect", fifo], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "KVSCOPE_PROBE_TIMEOUT": "1"})
    took = time.time() - t0
    check(res.returncode == 1 and "did not finish within 1.0 s" in res.stderr and "KVSCOPE_PROBE_TIMEOUT" in res.stderr,
          f"a stalled file is refused naming the limit it waited ({res.returncode}: {res.stderr.strip()})")
    check(took < 10, f"... in about the limit ({took:.1f} s)")


def sweep_workers_die_with_parent(tmp):
    prompts = os.path.join(tmp, "prompts")
    os.mkdir(prompts)
    for i in range(2):
        with open(os.path.join(prompts, f"p{i}.txt"), "w") as f:
            f.write("The lighthouse keeper climbed the stairs every evening to light the lamp. " * 8)
    parent = subprocess.Popen([BINARY, "sweep", "--policies", "h2o,snapkv", "--budgets", "10%,20%,30%,40%",
                               "--eval", "fidelity", "--prompts", prompts, "--out", os.path.join(tmp, "sweep"),
                               "--workers", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kids = wait_for_children(parent, "kvscope", count=2)
    check(len(kids) == 2, f"the sweep starts two workers (saw {len(kids)})")
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    check(gone_within(kids, 2.0), "the sweep's workers are gone within 2 s of kill -9 to the sweep")
    for k in kids:
        if alive(k):
            os.kill(k, signal.SIGKILL)


def refused_writes_keep_the_old_file(tmp):
    good = os.path.join(tmp, "good.h5")
    res = subprocess.run([BINARY, "trace", "--prompt", "A short prompt about lamps.", "--max-new-tokens", "2", "--quiet",
                          "--out", good], capture_output=True, text=True, timeout=600)
    check(res.returncode == 0, f"a good trace is written ({res.stderr.strip()})")
    with open(good, "rb") as f:
        before = f.read()

    long_prompt = os.path.join(tmp, "long.txt")
    with open(long_prompt, "w") as f:
        f.write("word " * 9000)
    res = subprocess.run([BINARY, "trace", "--prompt-file", long_prompt, "--out", good, "--force", "--quiet"],
                         capture_output=True, text=True, timeout=600)
    check(res.returncode == 2 and "exceeds the model's context" in res.stderr,
          f"a prompt longer than the context is refused ({res.returncode}: {res.stderr.strip()})")

    failing = os.path.join(tmp, "failing.py")
    with open(failing, "w") as f:
        f.write("def score(obs):\n    raise RuntimeError('mid-run failure')\n")
    res = subprocess.run([BINARY, "trace", "--prompt", "A short prompt about lamps.", "--policy", f"python:{failing}",
                          "--budget", "50%", "--out", good, "--force", "--quiet"], capture_output=True, text=True, timeout=600)
    check(res.returncode == 1 and "mid-run failure" in res.stderr, "a run that fails mid-way exits 1 with its error")

    # kill -9 while the trace is being written (a long prompt keeps it busy).
    mid = subprocess.Popen([BINARY, "trace", "--prompt-file", os.path.join(SOURCE, "sample_data", "prompts_long", "lathe_manual.txt"),
                            "--max-new-tokens", "64", "--out", good, "--force", "--quiet"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def temporaries():  # the writer's private folder, .good.h5.kvscope-XXXXXX.tmp
        return [n for n in os.listdir(tmp) if n.startswith(".good.h5.kvscope-") and n.endswith(".tmp")]
    deadline = time.time() + 120
    while time.time() < deadline and not temporaries() and mid.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)
    mid.kill()
    mid.wait()
    with open(good, "rb") as f:
        check(f.read() == before, "the good trace is untouched after the refusals, the failure and kill -9 mid-write")
    leftovers = [n for n in os.listdir(tmp) if n.startswith("good.h5") and n != "good.h5"]
    check(not leftovers, f"no other file beside it ({leftovers})")
    check(len(temporaries()) <= 1, f"kill -9 leaves at most the writer's hidden folder ({temporaries()})")
    for folder in temporaries():  # what kill -9 leaves: the temporary folder, named as such
        shutil.rmtree(os.path.join(tmp, folder))

    fig = os.path.join(tmp, "figure.png")
    names_before = sorted(os.listdir(tmp))
    res = subprocess.run([BINARY, "figure", good, "--view", "no_such_view", "--out", fig], capture_output=True, text=True)
    check(res.returncode != 0 and sorted(os.listdir(tmp)) == names_before, "a refused figure writes nothing")
    res = subprocess.run([BINARY, "figure", good, "--view", "attention", "--out", fig], capture_output=True, text=True)
    check(res.returncode == 0 and os.path.getsize(fig) > 1000, f"a figure is written ({res.stderr.strip()})")
    with open(fig, "rb") as f:
        previous = f.read()
    damaged = os.path.join(tmp, "damaged.h5")
    with open(damaged, "wb") as f:
        f.write(before[: len(before) // 3])
    res = subprocess.run([BINARY, "figure", damaged, "--view", "attention", "--out", fig, "--force"],
                         capture_output=True, text=True)
    with open(fig, "rb") as f:
        check(res.returncode != 0 and f.read() == previous and not [n for n in os.listdir(tmp) if ".figure.png." in n],
              f"a figure of a damaged trace fails and leaves the previous figure ({res.returncode}: {res.stderr.strip()[-200:]})")
    check("damaged" in res.stderr or "is not" in res.stderr or "truncated" in res.stderr, "... with an error about the file")


def main():
    if not os.path.exists(BINARY):
        print(f"KVSCOPE_BINARY is not set to an executable (got {BINARY!r})")
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        probe_children_die_with_parent(tmp)
        stall_limit(tmp)
        sweep_workers_die_with_parent(tmp)
        refused_writes_keep_the_old_file(tmp)
    print(f"test_nothing_left_behind: {passed()} checks passed, {len(FAILURES)} failed")
    if FAILURES:
        sys.exit(1)


if __name__ == "__main__":
    main()
