#!/usr/bin/env bash
# End-to-end: the real GUI under Xvfb runs a scripted session on the default model (live run, export,
# save to HDF5, screenshot), reopens the saved trace, and `kvscope figure` renders it headless. Each
# picture must be a real rendering: the expected size and many distinct colours (a blank or failed
# window has a handful). Exit 77 = skipped (no Xvfb, ImageMagick or default model).
set -euo pipefail
kvscope="${1:?usage: gui_e2e_test.sh path/to/kvscope}"
needs="xvfb-run identify"
source "$(dirname "$0")/gui_test_prelude.sh"

# A sweep's rows as \`kvscope sweep\` writes them, and a malformed one (a row short of a field).
cat > "$work/sweep.csv" <<CSV
cell,prompt,policy,budget,top1_agreement,kl_mean
0,p,streaming_llm,25%,0.5,0.9
1,p,streaming_llm,50%,0.75,0.4
2,p,streaming_llm,75%,1,0.05
3,p,h2o,25%,0.625,0.5
4,p,h2o,50%,0.875,0.2
5,p,h2o,75%,1,0.01
CSV
printf 'cell,prompt,policy,budget,kl_mean\n0,p,h2o,25%%\n' > "$work/bad_sweep.csv"

cat > "$work/session.kvs" <<SCRIPT
# A short prompt keeps the test quick; the policy evicts so every panel has something to show.
prompt The keeper wrote the weather in his log every night: wind, swell and ships. The key was under the seventh step. Where was the key?
policy streaming_llm
budget 50%
tokens 6
run
wait 1200
layer 2
token 5
frames 3
export attention $work/export_attention.png 900x600
# The cache at a step: the decode rows with the marks of decode step 1's cache, then of the end.
decode on
step 2
frames 3
export attention $work/step2_decode.png 900x600
screenshot $work/step2_window.png
step -1
frames 3
export attention $work/end_decode.png 900x600
decode off
export layer_stats $work/export_stats.svg
save $work/saved.h5
wait 1200
screenshot $work/shot.png
view compare
frames 3
screenshot $work/compare.png
open-sweep $work/sweep.csv
wait 60
view quality
metric kl_mean
frames 3
screenshot $work/quality.png
open-sweep $work/bad_sweep.csv
wait 60
frames 2
quit
SCRIPT

env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT xvfb-run -a -s "-screen 0 1280x800x24" "$kvscope" gui --width 1280 --height 800 --script "$work/session.kvs" \
  2> "$work/gui.log" || { cat "$work/gui.log" >&2; fail "gui exited with an error"; }
grep -q "during runs" "$work/gui.log" || fail "no frame statistics in the log"
# The window restarts itself so its model threads wait passively (app/openmp_wait_policy.h).
grep -q "OpenMP waits passive" "$work/gui.log" || fail "the window's OpenMP threads do not wait passively"
check_png "$work/shot.png" 1280 800 400
check_png "$work/compare.png" 1280 800 200
check_png "$work/quality.png" 1280 800 200
grep -q "fidelity to the full cache: top-1 agreement" "$work/gui.log" || fail "no fidelity of the live run in the log"
# Fidelity compares the tokens the full-cache baseline generated (to its end of generation), no more.
baseline_tokens=$(sed -n 's/.*: full: done in [0-9]* ms (\([0-9]*\) tokens.*/\1/p' "$work/gui.log" | head -1)
compared_tokens=$(sed -n 's/.*fidelity to the full cache: .* [0-9]* of \([0-9]*\) tokens equal.*/\1/p' "$work/gui.log" | head -1)
[ -n "$baseline_tokens" ] && [ "$baseline_tokens" = "$compared_tokens" ] ||
  fail "fidelity compared $compared_tokens tokens; the baseline generated $baseline_tokens"
grep -q "opened sweep $work/sweep.csv (6 rows, 2 policies, 3 budgets)" "$work/gui.log" || fail "the sweep did not open"
grep -q "error: '$work/bad_sweep.csv' line 2 has 4 fields" "$work/gui.log" || fail "the malformed sweep was not refused"
check_png "$work/export_attention.png" 900 600 100
check_png "$work/step2_decode.png" 900 600 100
check_png "$work/end_decode.png" 900 600 100
check_png "$work/step2_window.png" 1280 800 400
# Streaming-LLM evicts at every decode step, so the key marks of step 2's cache differ from the end's.
cmp -s "$work/step2_decode.png" "$work/end_decode.png" && fail "the attention export at step 2 equals the one at the end"
grep -q "<path d=" "$work/export_stats.svg" || fail "layer stats SVG has no data path"
[ -s "$work/saved.h5" ] || fail "saved.h5 was not written"

# The saved trace reopens in the window...
xvfb-run -a -s "-screen 0 1024x700x24" "$kvscope" gui "$work/saved.h5" --width 1024 --height 700 \
  --screenshot "$work/reopened.png" 2> "$work/gui2.log" || { cat "$work/gui2.log" >&2; fail "gui on the saved trace failed"; }
check_png "$work/reopened.png" 1024 700 300

# Damaged files are refused in the log panel, and the run opened before them stays: it still exports, and
# the window still draws. One is the saved trace cut short (the reader refuses it), the other crashes
# libhdf5 1.10 in a global-heap read (tests/python/test_damaged_trace.py makes it), which only the probe
# child survives.
head -c 40000 "$work/saved.h5" > "$work/truncated.h5"
python="${KVSCOPE_SOURCE_DIR:-$(dirname "$0")/../..}/.deps/venv/bin/python"
"$python" "$(dirname "$0")/../python/test_damaged_trace.py" --write-damaged "$work/damaged.h5"
cat > "$work/damaged.kvs" <<SCRIPT
open $work/saved.h5
wait 300
open $work/truncated.h5
wait 300
open $work/damaged.h5
wait 300
view summary
frames 3
export attention $work/after_damaged.png 900x600
screenshot $work/after_damaged_window.png
quit
SCRIPT
xvfb-run -a -s "-screen 0 1024x700x24" "$kvscope" gui --no-run --width 1024 --height 700 --script "$work/damaged.kvs" \
  2> "$work/gui3.log" || { cat "$work/gui3.log" >&2; fail "the window did not survive a damaged file"; }
grep -q "error: .*truncated.h5" "$work/gui3.log" || { cat "$work/gui3.log" >&2; fail "no error for the truncated file in the log"; }
grep -q "error: trace file '.*damaged.h5' is damaged: the HDF5 library failed" "$work/gui3.log" ||
  { cat "$work/gui3.log" >&2; fail "no 'is damaged' error for the heap-damaged file in the log"; }
check_png "$work/after_damaged.png" 900 600 100
check_png "$work/after_damaged_window.png" 1024 700 300

# ... and renders without any display at all.
env -u DISPLAY "$kvscope" figure "$work/saved.h5" --view attention --layer 3 --head 0 --out "$work/fig.png" --size 800x500 >/dev/null
check_png "$work/fig.png" 800 500 100
env -u DISPLAY "$kvscope" figure "$work/saved.h5" --view timeline --layer 3 --out "$work/timeline.png" >/dev/null
check_png "$work/timeline.png" 1200 800 5
env -u DISPLAY "$kvscope" figure "$work/saved.h5" --view layer_stats --out "$work/stats.svg" >/dev/null
grep -q "<svg" "$work/stats.svg" || fail "figure SVG is not SVG"
if env -u DISPLAY "$kvscope" figure "$work/saved.h5" --view attention --layer 99 --out "$work/bad.png" 2>/dev/null; then
  fail "an out-of-range layer was accepted"
fi
# A long prompt (issue 25): its maps are pooled, and the window records q/k, so zooming in redraws the visible
# region exactly and saving keeps q/k; `kvscope figure --queries --keys` renders a region of the saved run exactly,
# and refuses a trace recorded without q/k (kvscope trace's default), reversed ranges and ranges past the run.
samples="${KVSCOPE_SOURCE_DIR:-$(dirname "$0")/../..}/sample_data/prompts"
long_prompt="$(for i in 1 2 3; do cat "$samples"/*.txt; done | tr '\n' ' ')"
cat > "$work/long.kvs" <<SCRIPT
prompt $long_prompt
policy snapkv
budget 25%
tokens 4
run
wait 1200
view attention
layout attention
layer 14
head 3
frames 3
screenshot $work/long_overview.png
zoom 600 660 600 660
frames 6
mouse 700 450
frames 3
screenshot $work/long_zoomed.png
double-click
frames 4
screenshot $work/long_fitted.png
save $work/long.h5
wait 1200
quit
SCRIPT
env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT xvfb-run -a -s "-screen 0 1280x800x24" "$kvscope" gui --width 1280 --height 800 --script "$work/long.kvs" \
  2> "$work/gui_long.log" || { cat "$work/gui_long.log" >&2; fail "gui on the long prompt exited with an error"; }
check_png "$work/long_overview.png" 1280 800 400
check_png "$work/long_zoomed.png" 1280 800 100
check_png "$work/long_fitted.png" 1280 800 100
# The key-mark strip (evicted keys in #D62728) stays in view at any zoom: zoomed into the map's middle it is pinned
# to the plot's bottom (issue 38, item 2; before, only the legend's swatch had that colour there), and a
# double-click fits the map with the strip under it. (Within 8 %: single-key marks a pixel wide are blended at
# their edges; 2000 pixels is a strip across the plot, far more than the legend's swatch.)
evicted_pixels() { convert "$1" -fuzz 8% -fill black +opaque "#D62728" -fill white -opaque "#D62728" -format "%[fx:round(mean*w*h)]" info:; }
zoomed_red="$(evicted_pixels "$work/long_zoomed.png")" fitted_red="$(evicted_pixels "$work/long_fitted.png")"
[ "$zoomed_red" -gt 2000 ] || fail "zoomed into the map, the strip of evicted keys is not in view ($zoomed_red red pixels)"
[ "$fitted_red" -gt 2000 ] || fail "after a double-click the strip of evicted keys is not in view ($fitted_red red pixels)"
echo "ok: the strip is in view zoomed ($zoomed_red evicted-key pixels) and fitted ($fitted_red)"
"$kvscope" inspect "$work/long.h5" > "$work/long_inspect.txt"
grep -q "qk/layer_\*/queries" "$work/long_inspect.txt" || fail "the window's saved run has no q/k"
prompt_tokens="$(sed -n 's/.*prompt \([0-9]*\) tokens.*/\1/p' "$work/long_inspect.txt" | head -1)"
[ "${prompt_tokens:-0}" -gt 1024 ] || fail "the long prompt has ${prompt_tokens:-no} tokens; its maps would not be pooled"
env -u DISPLAY "$kvscope" figure "$work/long.h5" --layer 14 --head 3 --queries 600:660 --keys 600:660 --out "$work/long_region.png" \
  --size 900x700 >/dev/null
check_png "$work/long_region.png" 900 700 50
expect_refusal() {  # expect_refusal MESSAGE ARGS...: the figure must fail and say MESSAGE
  local message="$1"; shift
  if env -u DISPLAY "$kvscope" figure "$@" --out "$work/refused.png" 2> "$work/refused.log"; then fail "figure $* was accepted"; fi
  grep -q "$message" "$work/refused.log" || { cat "$work/refused.log" >&2; fail "figure $*: no '$message'"; }
}
expect_refusal "is empty or reversed" "$work/long.h5" --queries 660:600
expect_refusal "has q/k for positions 0:" "$work/long.h5" --keys 0:100000
"$kvscope" trace --quiet --prompt "The keeper wrote the weather in his log." --max-new-tokens 2 --out "$work/no_qk.h5" >/dev/null
expect_refusal "recorded without --record qk=on" "$work/no_qk.h5" --queries 0:4

# A Hugging Face folder runs live in the window too (the build converts the default GGUF into one).
hf="$(dirname "$kvscope")/../fixtures/smollm2-hf/bf16"
[ -f "$hf/config.json" ] || fail "no Hugging Face test folder at $hf (built by the target kvscope_hf_fixtures)"
cat > "$work/hf.kvs" <<SCRIPT
prompt The keeper wrote the weather in his log every night: wind, swell and ships. Where was the key?
policy h2o
budget 50%
tokens 3
run
wait 1200
frames 3
screenshot $work/hf_shot.png
quit
SCRIPT
xvfb-run -a -s "-screen 0 1280x800x24" "$kvscope" gui --model "$hf" --width 1280 --height 800 --script "$work/hf.kvs" \
  2> "$work/gui_hf.log" || { cat "$work/gui_hf.log" >&2; fail "gui on the Hugging Face folder exited with an error"; }
check_png "$work/hf_shot.png" 1280 800 400
echo "gui e2e: all checks passed"
