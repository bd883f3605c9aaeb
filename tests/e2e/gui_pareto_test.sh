#!/usr/bin/env bash
# End-to-end (issue 37, item 4): the Quality panel's Pareto view. A sweep with cache types opened in the window and
# its x axis set to the cache's bytes (`quality-x cache_bytes`) draws what `kvscope figure --view pareto` draws:
# the window's SVG export equals the command's byte for byte (one data path, pareto_plot.h), with a curve per
# (policy, cache type) and the front marked. A picked point runs its (policy, budget, cache type) live, once. An
# unknown axis is refused by name. Exit 77 = skipped.
set -euo pipefail
kvscope="${1:?usage: gui_pareto_test.sh path/to/kvscope}"
needs="xvfb-run identify"
source "$(dirname "$0")/gui_test_prelude.sh"

# tests/fixtures/pareto_sweep.csv: two prompts per cell, so each point has an interval; q8_0 is 34/32 of f16's bytes
# per entry (scales), kept at the same budgets, and keeps nearly the same quality: the front holds f16 and q8_0
# points of both policies.
cp "$(dirname "$0")/../fixtures/pareto_sweep.csv" "$work/sweep.csv"

cat > "$work/session.kvs" <<SCRIPT
frames 3
open-sweep $work/sweep.csv
wait 60
view quality
metric kl_mean
frames 3
screenshot $work/budget_axis.png
quality-x cache_bytes
frames 3
screenshot $work/pareto.png
export quality $work/window.svg 1200x800
quit
SCRIPT
window_log="$work/gui.log"
xvfb-run -a -s "-screen 0 1280x800x24" "$kvscope" gui --no-run --width 1280 --height 800 --script "$work/session.kvs" \
  > "$window_log" 2>&1 || fail "gui exited with an error"
check_png "$work/budget_axis.png" 1280 800 150
check_png "$work/pareto.png" 1280 800 150
cmp -s "$work/budget_axis.png" "$work/pareto.png" && fail "the Pareto view looks like the budget view"
"$kvscope" figure "$work/sweep.csv" --view pareto --metric kl_mean --size 1200x800 --out "$work/cli.svg" > /dev/null ||
  fail "kvscope figure --view pareto failed"
cmp -s "$work/window.svg" "$work/cli.svg" || fail "the window's Pareto export differs from kvscope figure --view pareto's"
for series in "h2o @f16" "h2o @q8_0" "snapkv @f16" "snapkv @q8_0" "Pareto front" "cache_bytes (MiB"; do
  grep -q "$series" "$work/window.svg" || fail "the Pareto export does not name '$series'"
done
# The front as the command writes it: q8_0 dominates f16 here (fewer bytes, KL within a few hundredths), so both
# snapkv @q8_0 points are on it and no f16 point of h2o is.
grep -q '"series": "snapkv @q8_0"' "$work/cli.svg.front.json" || fail "snapkv @q8_0 is not on the front"

# A point of the Pareto view asks for its (policy, budget, cache type) as the live run (issue 38): picked as a click
# picks it, the set-up form runs snapkv at 25 % with a q8_0 cache on the model, and the status line says so; picked
# again, the run on screen is shown and nothing runs a second time.
cat > "$work/click.kvs" <<SCRIPT
prompt The keeper wrote the weather in his log every night. The key was under the seventh step. Where was the key?
tokens 3
open-sweep $work/sweep.csv
wait 60
view quality
quality-x cache_bytes
pick snapkv 25% q8_0
wait 600
frames 3
screenshot $work/pareto_clicked.png
pick snapkv 25% q8_0
wait 600
frames 2
quit
SCRIPT
click_log="$work/click.log"
env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT xvfb-run -a -s "-screen 0 1280x800x24" "$kvscope" gui --no-run --width 1280 --height 800 \
  --script "$work/click.kvs" > "$click_log" 2>&1 || { window_log="$click_log"; fail "gui exited with an error on the click"; }
window_log="$click_log"
grep -q "started snapkv at 25% with a q8_0 cache live (Pareto point)" "$click_log" || fail "the picked point did not start its run"
grep -q "snapkv_b25pct_q8_0: done" "$click_log" || fail "no run of snapkv at 25% with a q8_0 cache finished"
grep -q "showing snapkv_b25pct_q8_0.*: snapkv at 25% with a q8_0 cache is already on screen (Pareto point)" "$click_log" ||
  fail "picked again, the run on screen was not shown"
[ "$(grep -c "snapkv_b25pct_q8_0: done" "$click_log")" = 1 ] || fail "picked again, the point ran a second time"
check_png "$work/pareto_clicked.png" 1280 800 150
window_log=""

printf 'open-sweep %s\nwait 60\nquality-x bytes\nquit\n' "$work/sweep.csv" > "$work/bad.kvs"
xvfb-run -a -s "-screen 0 1280x800x24" "$kvscope" gui --no-run --width 1280 --height 800 --script "$work/bad.kvs" \
  > "$work/bad.log" 2>&1 && fail "quality-x bytes was accepted"
grep -q "budget, cache_bytes, cache_peak_bytes, cache_paged_bytes, cache_paged_peak_bytes, not 'bytes'" "$work/bad.log" || { cat "$work/bad.log" >&2; fail "no message naming the axes"; }
echo "ok: the Quality panel's Pareto view is kvscope figure --view pareto's"
