"""A user's policy file through the real command line (issue 22): traces record which file ran (path, kind and
the SHA-256 of its bytes, checked here with hashlib), `kvscope policies --file` lists its parameters, `eval`
takes it, and mistakes are errors naming the file and line with the right exit code, leaving no trace that
looks complete."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import h5py

from checks import FAILURES, check, passed

SOURCE = os.environ.get("KVSCOPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("KVSCOPE_BINARY", "")
PROMPT = "The lighthouse keeper climbed the stairs every evening to light the lamp before the ships came in."


def kvscope(*args):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=600)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def trace(out, policy, *extra):
    return kvscope("trace", "--prompt", PROMPT, "--policy", policy, "--budget", "50%", "--quiet", "--out", out, *extra)


def run_attrs(path):
    with h5py.File(path, "r") as f:
        runs = list(f["runs"].keys())
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f["runs"][runs[0]].attrs.items()}


def main():
    if not os.path.exists(BINARY):
        print(f"KVSCOPE_BINARY is not set to an executable (got {BINARY!r})")
        sys.exit(2)
    key_norm = os.path.join(SOURCE, "examples", "policies", "key_norm.py")
    plugin = os.path.join(os.path.dirname(BINARY), "..", "plugins", "h2o_plugin.so")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "kn.h5")
        res = trace(out, f"python:{key_norm}", "--max-new-tokens", "4")
        check(res.returncode == 0, f"trace of a Python policy succeeds ({res.stderr.strip()})")
        if res.returncode == 0:
            a = run_attrs(out)
            check(a.get("policy_file") == os.path.abspath(key_norm), "the trace names the policy file")
            check(a.get("policy_file_kind") == "python", "... and its kind")
            check(a.get("policy_file_sha256") == sha256(key_norm), "... and the SHA-256 of its bytes")
            check(a.get("policy") == "python:key_norm", "the policy is named after the file's stem")
            check(int(a.get("complete", 0)) == 1, "the run is complete")

        out = os.path.join(tmp, "plugin.h5")
        res = trace(out, f"plugin:{plugin},recent_ratio=0.25", "--max-new-tokens", "4")
        check(res.returncode == 0, f"trace of a plugin succeeds ({res.stderr.strip()})")
        if res.returncode == 0:
            a = run_attrs(out)
            check(a.get("policy_file_kind") == "plugin" and a.get("policy_file_sha256") == sha256(plugin),
                  "a plugin's trace records its file and SHA-256")
            check(json.loads(a["policy_params"]).get("recent_ratio") == "0.25", "the plugin's parameter is recorded")

        res = kvscope("policies", "--file", os.path.join(SOURCE, "examples", "policies", "h2o_numpy.py"), "--json")
        check(res.returncode == 0, "policies --file lists a Python file")
        if res.returncode == 0:
            params = {p["name"]: p for p in json.loads(res.stdout)["params"]}
            check(params.get("recent_ratio", {}).get("default") == "0.5", "... with its declared parameter")
            check(params.get("decode_evict", {}).get("default") == "true", "... and its protocol defaults")

        res = kvscope("eval", "fidelity", "--prompt", PROMPT, "--policy", f"python:{key_norm}", "--budget", "50%",
                      "--max-new-tokens", "4")
        check(res.returncode == 0, f"eval fidelity takes a Python policy ({res.stderr.strip()[-300:]})")

        syntax = os.path.join(tmp, "syntax.py")
        with open(syntax, "w") as f:
            f.write("def score(obs)\n    return obs.keys\n")
        out = os.path.join(tmp, "syntax.h5")
        res = trace(out, f"python:{syntax}")
        check(res.returncode == 2 and syntax in res.stderr and "line 1" in res.stderr and "SyntaxError" in res.stderr,
              f"a syntax error exits 2 naming file and line ({res.returncode}: {res.stderr.strip()})")
        check(not os.path.exists(out), "a file that does not load writes no trace")

        raising = os.path.join(tmp, "raising.py")
        with open(raising, "w") as f:
            f.write("def score(obs):\n    raise ValueError('bad idea')\n")
        out = os.path.join(tmp, "raising.h5")
        res = trace(out, f"python:{raising}")
        check(res.returncode == 1 and raising in res.stderr and "line 2 (in score): ValueError: bad idea" in res.stderr,
              f"an exception in score() exits 1 naming file, line and function ({res.returncode}: {res.stderr.strip()})")
        if os.path.exists(out):
            check(int(run_attrs(out).get("complete", 1)) == 0, "the failed run's trace is marked incomplete")

    print(f"test_user_policy: {passed()} checks passed, {len(FAILURES)} failed")
    if FAILURES:
        sys.exit(1)


if __name__ == "__main__":
    main()
