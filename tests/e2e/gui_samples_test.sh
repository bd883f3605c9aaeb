#!/usr/bin/env bash
# End-to-end (issue 35): the Samples panel in the real window under Xvfb. `kvscope eval needle --traces` writes a
# folder of per-sample traces (a StreamingLLM sample whose needle lies outside its window, and the full cache's
# own sample), a trace cut short joins them, and a scripted window opens the folder (`gui --samples DIR`), selects
# the first row and takes screenshots of the table, Compare and the attention map framed on the evidence. The cut
# trace must be a row with its error, never a crash, and selecting it a script error naming it. Exit 77 = skipped.
set -euo pipefail
kvscope="${1:?usage: gui_samples_test.sh path/to/kvscope}"
needs="xvfb-run identify"
source "$(dirname "$0")/gui_test_prelude.sh"
window_log="$work/gui.log"

traces="$work/traces"
"$kvscope" eval needle --lengths 256 --depths 25 --policy streaming_llm --budget 32 --threads 1 \
  --traces "$traces" --traces-for all > /dev/null 2> "$work/eval1.log" || { cat "$work/eval1.log" >&2; fail "eval needle"; }
"$kvscope" eval needle --lengths 256 --depths 75 --policy full --threads 1 \
  --traces "$traces" --traces-for all > /dev/null 2> "$work/eval2.log" || { cat "$work/eval2.log" >&2; fail "eval needle full"; }
head -c 8192 "$traces/needle_256_25.h5" > "$traces/zz_cut.h5"

cat > "$work/session.kvs" <<SCRIPT
wait 300
frames 4
screenshot $work/table.png
select-sample 0
wait 300
frames 4
screenshot $work/compare.png
view attention
frames 4
screenshot $work/attention.png
quit
SCRIPT
# window SCRIPT WxH: runs the window on the folder; its stderr in gui.log, its exit code in $code (kept apart from
# xvfb-run's own, which can fail cleaning up when other servers run beside it).
window() {
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT xvfb-run -a -s "-screen 0 ${2}x24" sh -c \
    '"$0" gui --samples "$1" --width "${2%x*}" --height "${2#*x}" --script "$3" 2> "$4"; echo $? > "$5"' \
    "$kvscope" "$traces" "$2" "$1" "$work/gui.log" "$work/code" || true
  code=$(cat "$work/code" 2>/dev/null || echo none)
}
window "$work/session.kvs" 1600x1000
[ "$code" = 0 ] || fail "gui exited with $code"
grep -q "samples: read 3 trace(s) from $traces (.* wrong, 1 unreadable)" "$work/gui.log" || fail "the folder was not read"
grep -q "error: samples: .*zz_cut.h5" "$work/gui.log" || fail "no error naming the cut trace"
# The first row in file order is the StreamingLLM sample: its run beside the full cache's, at the step that
# sampled the first answer token, with the needle's one span.
grep -q "samples: showing needle_256_25.h5 (streaming_llm_b32 beside full, step [0-9]*, 1 evidence span(s))" \
  "$work/gui.log" || fail "selecting row 0 did not show the sample"
check_png "$work/table.png" 1600 1000 200
check_png "$work/compare.png" 1600 1000 400
check_png "$work/attention.png" 1600 1000 400
# KVSCOPE_SCREENSHOT_DIR=DIR keeps the pictures (docs/screenshots/samples_panel.png is compare.png).
if [ -n "${KVSCOPE_SCREENSHOT_DIR:-}" ]; then cp "$work/table.png" "$work/compare.png" "$work/attention.png" "$KVSCOPE_SCREENSHOT_DIR/"; fi

# The script's sort and filter: by score descending the full cache's right answer comes first (the cut trace, with
# no score, stays last in either direction); filtered to wrong answers, the StreamingLLM sample is row 0.
printf 'wait 300\nsamples-sort score desc\nselect-sample 0\nwait 300\nsamples-filter wrong\nsamples-sort file\nselect-sample 0\nwait 300\nquit\n' \
  > "$work/sorted.kvs"
window "$work/sorted.kvs" 1024x700
[ "$code" = 0 ] || fail "the sort and filter script exited $code"
grep -q "samples: showing needle_256_75.h5" "$work/gui.log" || fail "samples-sort score desc did not put the right answer first"
grep -q "samples: showing needle_256_25.h5" "$work/gui.log" || fail "samples-filter wrong did not leave the wrong sample first"
printf 'samples-sort size\nquit\n' > "$work/badsort.kvs"
window "$work/badsort.kvs" 1024x700
[ "$code" = 1 ] || fail "an unknown sort column exited $code, expected 1"
grep -q "samples column 'size': expected one of file, score" "$work/gui.log" || fail "no error naming the unknown column"

# Selecting the cut trace's row (the last in file order) is a script error naming the file; the window exits 1.
printf 'wait 300\nselect-sample 2\nquit\n' > "$work/bad.kvs"
window "$work/bad.kvs" 1024x700
[ "$code" = 1 ] || fail "selecting the cut trace exited $code, expected 1"
grep -q "select-sample: sample file 'zz_cut.h5' cannot be shown" "$work/gui.log" || fail "no error naming the cut trace"
echo "ok: samples panel"
