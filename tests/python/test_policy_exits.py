"""A policy never fakes success (issue 34, item 4), and a policy file's mistakes are named (item 9).

Python policies that end the process (os._exit(0), sys.exit(0), exit(), raise SystemExit, in score() or at
import) make generate, trace, eval and sweep fail, naming the file and the callback; `trace --force` over an
old trace leaves that trace byte for byte (its SHA-256) and nothing beside it. A plugin calling exit(0) in
score() ends the process with a non-zero status naming the plugin and callback; a segfaulting plugin (and a
Python policy crashing in an extension) dies of SIGSEGV as before, naming the file and callback first.
Wrong types, out-of-range defaults, None and float32-overflowing scores are refused with what was wrong."""
import hashlib
import os
import signal
import subprocess
import sys

from checks import check, run_in_temp_folder

SOURCE = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("KVSCOPE_BINARY", "")
PLUGINS = os.environ.get("KVSCOPE_PLUGIN_DIR", os.path.join(os.path.dirname(BINARY), "..", "plugins"))
MODEL = os.path.join(SOURCE, "tests", "fixtures", "hf_synthetic", "llama3")
PROMPT = "The lighthouse keeper climbed the stairs every evening to light the lamp."
SCORES = "-obs.positions.astype('float32')"

EXITS = {
    "os_exit": "import os\n\ndef score(obs):\n    os._exit(0)\n",
    "sys_exit": "import sys\n\ndef score(obs):\n    sys.exit(0)\n",
    "builtin_exit": "def score(obs):\n    exit()\n",
    "raise_systemexit": "def score(obs):\n    raise SystemExit\n",
    # The refusal caught by the policy: the call fails all the same.
    "caught_os_exit": f"import os\n\ndef score(obs):\n    try:\n        os._exit(0)\n    except BaseException:\n"
                      f"        pass\n    return {SCORES}\n",
}


def kvscope(*args, cwd=None):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def short(res):
    return f"{res.returncode}: {res.stderr.strip()[-500:]}"


def run_commands(policy, tmp, tag):
    """The policy through generate, trace --force over an old trace, eval and sweep: (command, result)."""
    common = ["--model", MODEL, "--prompt", PROMPT]
    out = []
    out.append(("generate", kvscope("generate", *common, "--policy", policy, "--budget", "50%", "--max-new-tokens", "2")))
    traces = os.path.join(tmp, f"traces_{tag}")
    os.makedirs(traces)
    old = os.path.join(traces, "old.h5")
    res = kvscope("trace", *common, "--policy", "h2o", "--budget", "50%", "--max-new-tokens", "2", "--quiet", "--out", old)
    check(res.returncode == 0, f"{tag}: the old trace is written ({short(res)})")
    before = sha256(old) if os.path.exists(old) else ""
    res = kvscope("trace", *common, "--policy", policy, "--budget", "50%", "--max-new-tokens", "2", "--quiet",
                  "--out", old, "--force")
    out.append(("trace --force", res))
    if before:
        check(os.path.exists(old) and sha256(old) == before, f"{tag}: trace --force leaves the old trace as it was")
        # A process that survives cleans up, and so does one a plugin ended with exit() (its exit handler
        # abandons the outputs being written).
        check(sorted(os.listdir(traces)) == ["old.h5"], f"{tag}: ... and nothing beside it ({sorted(os.listdir(traces))})")
    out.append(("eval", kvscope("eval", "fidelity", *common, "--policy", policy, "--budget", "50%",
                                "--max-new-tokens", "2")))
    sweep = os.path.join(tmp, f"sweep_{tag}")
    out.append(("sweep", kvscope("sweep", *common, "--policies", policy, "--budgets", "50%", "--eval", "fidelity",
                                 "--max-new-tokens", "2", "--out", sweep)))
    return out


def all_checks(tmp):
    # Python policies that end the process, in score().
    for tag, source in EXITS.items():
        path = write(tmp, tag + ".py", source)
        for command, res in run_commands("python:" + path, tmp, tag):
            check(res.returncode == 1 and path in res.stderr and ("(in score)" in res.stderr or "score()" in res.stderr),
                  f"{tag} in score(): {command} exits 1 naming the file and score() ({short(res)})")
            check("may not end kvscope's process" in res.stderr, f"{tag}: {command} says why ({short(res)})")

    # ... and at import: the file does not load (a usage error).
    for tag, source in {"import_os_exit": "import os\nos._exit(0)\n", "import_sys_exit": "import sys\nsys.exit(0)\n"}.items():
        path = write(tmp, tag + ".py", source + f"def score(obs):\n    return {SCORES}\n")
        res = kvscope("policies", "--file", "python:" + path)
        check(res.returncode == 2 and path in res.stderr and "line 2" in res.stderr and
              "may not end kvscope's process" in res.stderr, f"{tag}: loading exits 2 naming file and line ({short(res)})")

    # A Python policy crashing inside an extension (ctypes reading address 0).
    path = write(tmp, "py_crash.py", "import ctypes\n\ndef score(obs):\n    ctypes.memset(0, 0, 8)\n")
    res = kvscope("generate", "--model", MODEL, "--prompt", PROMPT, "--policy", "python:" + path, "--budget", "50%",
                  "--max-new-tokens", "2")
    check(res.returncode == -signal.SIGSEGV and path in res.stderr and "crashed in score() for layer" in res.stderr,
          f"a Python policy's segfault dies of SIGSEGV naming file and score() ({short(res)})")

    # Plugins: exit(0) in score() cannot be survived; the status is not 0 and stderr says who.
    exiting = os.path.abspath(os.path.join(PLUGINS, "exiting_plugin.so"))
    for command, res in run_commands("plugin:" + exiting, tmp, "plugin_exit"):
        check(res.returncode != 0 and exiting in res.stderr and "exit(0) in score()" in res.stderr,
              f"exit(0) in a plugin's score(): {command} exits non-zero naming the plugin ({short(res)})")
    sweep = os.path.join(tmp, "sweep_workers")
    res = kvscope("sweep", "--model", MODEL, "--prompt", PROMPT, "--policies", "plugin:" + exiting, "--budgets", "50%",
                  "--eval", "fidelity", "--max-new-tokens", "2", "--out", sweep, "--workers", "2")
    check(res.returncode != 0 and exiting in res.stderr and "exited with status 1" in res.stderr,
          f"sweep --workers 2: a worker ended by the plugin is a failure naming the plugin ({short(res)})")

    crashing = os.path.abspath(os.path.join(PLUGINS, "crashing_plugin.so"))
    res = kvscope("generate", "--model", MODEL, "--prompt", PROMPT, "--policy", "plugin:" + crashing, "--budget", "50%",
                  "--max-new-tokens", "2")
    check(res.returncode == -signal.SIGSEGV and crashing in res.stderr and "crashed in score() for layer 0" in res.stderr
          and "SIGSEGV" in res.stderr, f"a segfaulting plugin dies of SIGSEGV naming file and score() ({short(res)})")

    # Messages: what was wrong, where.
    path = write(tmp, "protocol_type.py", f"protocol = {{'decode_evict': 'maybe'}}\n\ndef score(obs):\n    return {SCORES}\n")
    res = kvscope("policies", "--file", "python:" + path)
    check(res.returncode == 2 and path in res.stderr and "protocol['decode_evict'] must be True or False, not 'maybe'"
          in res.stderr, f"a protocol value of the wrong type is named with the type expected ({short(res)})")
    path = write(tmp, "block_type.py", f"protocol = {{'block': 2.5}}\n\ndef score(obs):\n    return {SCORES}\n")
    res = kvscope("policies", "--file", "python:" + path)
    check(res.returncode == 2 and "protocol['block'] must be an int, not 2.5" in res.stderr,
          f"protocol['block'] of the wrong type is named ({short(res)})")
    path = write(tmp, "default_range.py", f"params = {{'alpha': (5.0, 0.0, 1.0)}}\n\ndef score(obs):\n    return {SCORES}\n")
    res = kvscope("policies", "--file", "python:" + path)
    check(res.returncode == 2 and path in res.stderr and "parameter 'alpha': default 5 is outside its own range, [0, 1]"
          in res.stderr, f"a default outside its own range is refused at load ({short(res)})")
    path = write(tmp, "window_range.py", f"params = {{'window': 5000}}\n\ndef score(obs):\n    return {SCORES}\n")
    res = kvscope("policies", "--file", "python:" + path)
    check(res.returncode == 2 and "parameter 'window': default 5000 is outside its own range, integer in [0, 4096]"
          in res.stderr, f"a framework parameter's default outside its range is refused ({short(res)})")
    path = write(tmp, "huge_int.py", f"params = {{'n': 10**30}}\n\ndef score(obs):\n    return {SCORES}\n")
    res = kvscope("policies", "--file", "python:" + path)
    check(res.returncode == 2 and "params['n'] default = 1000000000000000000000000000000 does not fit a 32-bit int"
          in res.stderr, f"an int default beyond 32 bits is named ({short(res)})")
    res = kvscope("policies", "--file", "plugin:" + os.path.join(PLUGINS, "out_of_range_plugin.so"))
    check(res.returncode == 2 and "out_of_range_plugin.so" in res.stderr and
          "parameter 'alpha': default 5 is outside its own range, [0, 1]" in res.stderr,
          f"a plugin's default outside its range is refused at load ({short(res)})")

    for tag, body, wanted in [
        ("none_scores", "return None", "score() (line 1) for layer 0 returned None"),
        ("overflow_scores", "import numpy as np\n    return np.full((obs.n_kv_heads, obs.n_entries), 1e308)",
         "the score returned there is 1e+308, finite as a float64 but beyond float32's largest"),
    ]:
        path = write(tmp, tag + ".py", f"def score(obs):\n    {body}\n")
        res = kvscope("generate", "--model", MODEL, "--prompt", PROMPT, "--policy", "python:" + path, "--budget", "50%",
                      "--max-new-tokens", "2")
        check(res.returncode == 1 and path in res.stderr and wanted in res.stderr, f"{tag}: says '{wanted}' ({short(res)})")


def main():
    return run_in_temp_folder(BINARY, "kvscope_policy_exits_", all_checks)


if __name__ == "__main__":
    sys.exit(main())
