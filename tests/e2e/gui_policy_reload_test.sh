#!/usr/bin/env bash
# End-to-end (issue 22): a Python policy in the real window under Xvfb is re-run whenever its file is saved,
# with the prefill replayed; a save with a syntax error and one whose score() raises are reported naming the
# file and line while the window stays up with its runs; the next good save runs again and the kept set
# follows the new scorer. Exit 77 = skipped.
set -euo pipefail
kvscope="${1:?usage: gui_policy_reload_test.sh path/to/kvscope}"
needs="xvfb-run"
source "$(dirname "$0")/gui_test_prelude.sh"
window_log="$work/out.txt"
policy="$work/mine.py"

# The versions an editor saves, one after another: smallest key norms kept, a syntax error, an exception
# inside score(), then the largest key norms kept.
printf 'def score(obs):\n    return -(obs.keys ** 2).sum(axis=-1)\n' > "$work/smallest.py"
printf 'def score(obs)\n    return obs.keys\n' > "$work/syntax.py"
printf 'import numpy\n\ndef score(obs):\n    raise ValueError("not yet")\n' > "$work/raises.py"
printf 'def score(obs):\n    return (obs.keys ** 2).sum(axis=-1)\n' > "$work/largest.py"
cp "$work/smallest.py" "$policy"
cat > "$work/session.kvs" <<SCRIPT
prompt The keeper wrote the weather in his log every night: wind, swell and ships. The key was under the seventh step. Where was the key?
policy python:$policy
budget 50%
tokens 4
run
wait 600
save $work/smallest.h5
wait 600
save-file $work/syntax.py $policy
frames 3
wait 600
save-file $work/raises.py $policy
frames 3
wait 600
save-file $work/largest.py $policy
frames 3
wait 600
screenshot $work/after.png
save $work/largest.h5
wait 600
quit
SCRIPT

timeout 300 xvfb-run -a -s "-screen 0 1280x800x24" "$kvscope" gui --no-run --script "$work/session.kvs" > "$work/out.txt" 2>&1 ||
  fail "the window exited with $?"

grep -q "error: policy file '$policy', line 1: .*SyntaxError" "$work/out.txt" || fail "the syntax error was not reported with file and line"
grep -q "$policy', line 4 (in score): ValueError: not yet" "$work/out.txt" || fail "the exception in score() was not reported with file and line"
reloads=$(grep -c "reloaded $policy" "$work/out.txt" || true)
[ "$reloads" -eq 2 ] || fail "expected 2 reloads (the raising and the good save), saw $reloads"
grep -q "python_mine_b50pct: done in .*prefill reused" "$work/out.txt" || fail "the good save was not re-run with the prefill replayed"
# The saved runs, read back with h5py: each records the SHA-256 of the version that ran, and the two
# versions (opposite scorers) kept different entries.
python="$(cd "$(dirname "$0")/../.." && pwd)/.deps/venv/bin/python"
[ -x "$python" ] || { echo "skip: no project venv with h5py"; exit 77; }
"$python" - "$work" <<'PY' || fail "the saved traces do not say which version of the policy ran"
import hashlib, sys
import h5py
import numpy as np
work = sys.argv[1]
kept = []
for version in ("smallest", "largest"):
    with h5py.File(f"{work}/{version}.h5", "r") as f:
        run = f["runs/python_mine_b50pct"]
        want = hashlib.sha256(open(f"{work}/{version}.py", "rb").read()).hexdigest()
        got = run.attrs["policy_file_sha256"].decode()
        assert got == want, f"{version}: sha256 {got}, the file that ran is {want}"
        kept.append(np.concatenate([run["kept_mask"][k][()].ravel() for k in sorted(run["kept_mask"])]))
assert not np.array_equal(kept[0], kept[1]), "both versions kept the same entries"
PY
echo "ok: syntax error and exception reported with file and line, $reloads reloads, re-run with the prefill replayed, provenance of each version"
