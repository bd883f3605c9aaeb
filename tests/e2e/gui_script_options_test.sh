#!/usr/bin/env bash
# End-to-end (issue 38, item 7): `kvscope gui --script` honours --prompt, --policy, --budget and --max-new-tokens
# (before, a scripted session ran on the sample prompt whatever the command line said): a script's `run` and its
# `load-default` both run the form those options filled, checked in the saved trace's attributes. --screenshot
# beside --script (which it would have been dropped for) is refused before a window opens. Exit 77 = skipped.
set -euo pipefail
kvscope="${1:?usage: gui_script_options_test.sh path/to/kvscope}"
needs="xvfb-run"
source "$(dirname "$0")/gui_test_prelude.sh"
python="$(cd "$(dirname "$0")/../.." && pwd)/.deps/venv/bin/python"
[ -x "$python" ] || { echo "skip: no project venv with h5py"; exit 77; }
window_log="$work/out.txt"
prompt="The keeper wrote the weather in his log every night: wind, swell and ships."

for start in run load-default; do
  cat > "$work/$start.kvs" <<SCRIPT
$start
wait 600
save $work/$start.h5
wait 600
quit
SCRIPT
  timeout 300 xvfb-run -a -s "-screen 0 1280x720x24" "$kvscope" gui --script "$work/$start.kvs" --prompt "$prompt" \
    --policy h2o --budget 8 --max-new-tokens 3 > "$window_log" 2>&1 || fail "the window exited with $? ($start)"
  "$python" - "$work/$start.h5" "$prompt" <<'PY' || fail "'$start' did not run the form the command line set"
import sys
import h5py
path, prompt = sys.argv[1], sys.argv[2]
with h5py.File(path, "r") as f:
    runs = {name: f["runs"][name] for name in f["runs"]}
    live = [r for r in runs.values() if r.attrs["policy"].decode() != "full"]
    assert len(live) == 1, f"expected one policy run besides the baseline, got {sorted(runs)}"
    attrs = {k: live[0].attrs[k].decode() for k in ("policy", "budget", "max_new_tokens", "prompt")}
    want = {"policy": "h2o", "budget": "8", "max_new_tokens": "3", "prompt": prompt}
    assert attrs == want, f"{attrs} != {want}"
PY
  echo "ok: '$start' ran h2o at 8 tokens, 3 new tokens, on the prompt given"
done

set +e
DISPLAY= "$kvscope" gui --script "$work/run.kvs" --screenshot "$work/x.png" > "$window_log" 2>&1
code=$?
set -e
[ "$code" -ne 0 ] || fail "--screenshot beside --script was accepted"
grep -q -- "--screenshot cannot be combined with --script" "$window_log" || fail "the refusal does not say why"
echo "ok: --screenshot with --script refused: $(head -1 "$window_log")"

# The script's `device` (and --device, which fills the form the same way): a name other than cpu or cuda, and
# cuda where no CUDA device exists, fail the script naming why; `device cpu` runs.
for case in "gpu:expected cpu or cuda" "cuda:no CUDA device"; do
  name=${case%%:*} want=${case#*:}
  printf 'device %s\nrun\nwait 600\nquit\n' "$name" > "$work/device.kvs"
  if "$kvscope" info --devices --json | grep -q '"devices": \[\]' || [ "$name" != cuda ]; then
    set +e
    timeout 300 xvfb-run -a -s "-screen 0 1280x720x24" "$kvscope" gui --script "$work/device.kvs" > "$window_log" 2>&1
    code=$?
    set -e
    [ "$code" -ne 0 ] || fail "script 'device $name' was accepted"
    grep -q -- "$want" "$window_log" || fail "script 'device $name' failed without saying '$want': $(tail -3 "$window_log")"
    echo "ok: script 'device $name' refused: $(grep -m1 -- "$want" "$window_log")"
  fi
done
printf 'device cpu\nrun\nwait 600\nsave %s\nwait 600\nquit\n' "$work/cpu.h5" > "$work/device.kvs"
timeout 300 xvfb-run -a -s "-screen 0 1280x720x24" "$kvscope" gui --script "$work/device.kvs" --policy h2o --budget 8 \
  --max-new-tokens 2 > "$window_log" 2>&1 || fail "script 'device cpu' failed: $(tail -3 "$window_log")"
[ -s "$work/cpu.h5" ] || fail "script 'device cpu' saved no trace"
echo "ok: script 'device cpu' ran and saved its runs"
