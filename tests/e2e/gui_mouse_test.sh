#!/usr/bin/env bash
# End-to-end (issue 38): a Pareto point clicked with the real X pointer. Every other window test drives the pointer
# through the script (`mouse`, `click`, `pick`), inside the window; this one moves the X server's pointer with xdotool,
# as a user's mouse would, so GLFW's input callbacks, Dear ImGui's event queue and the Pareto view's hit test all run.
# The window says where it drew each point (`points`: window pixels) and what it did (`status`: the status bar's
# note, the latest read-out under the pointer and the runs on screen). The pointer hovers the point of snapkv at 25 %
# with a q8_0 cache (its read-out must name it), then clicks it: the click must start that run live, and it must
# finish. Exit 77 = skipped (no Xvfb, no xdotool or no default model).
set -euo pipefail
kvscope="${1:?usage: gui_mouse_test.sh path/to/kvscope}"
needs="xvfb-run Xvfb xdotool"
source "$(dirname "$0")/gui_test_prelude.sh"
cp "$(dirname "$0")/../fixtures/pareto_sweep.csv" "$work/sweep.csv"

# The script waits (`wait-file`) while the driver below moves and clicks the pointer.
cat > "$work/session.kvs" <<SCRIPT
frames 3
prompt The keeper wrote the weather in his log every night. The key was under the seventh step. Where was the key?
tokens 3
open-sweep $work/sweep.csv
wait 60
view quality
quality-x cache_bytes
frames 4
points $work/points.tsv
wait-file $work/hovered 60
frames 4
status $work/hover.txt
wait-file $work/clicked 60
frames 4
wait 300
frames 2
status $work/after.txt
quit
SCRIPT

# Runs inside xvfb-run, where DISPLAY is the virtual screen: the window, then the pointer.
cat > "$work/driver.sh" <<'DRIVER'
set -euo pipefail
"$kvscope" gui --no-run --width 1280 --height 800 --script "$work/session.kvs" > "$work/gui.log" 2>&1 &
gui=$!
wait_for() {  # FILE: until the window writes it (or exits)
  for _ in $(seq 1 600); do
    [ -s "$1" ] && return 0
    kill -0 "$gui" 2>/dev/null || { echo "the window exited before writing $1"; exit 3; }
    sleep 0.1
  done
  echo "no $1 after 60 s"; exit 3
}
wait_for "$work/points.tsv"
read -r x y < <(awk -F'\t' '$3 == "snapkv" && $4 == "25%" && $5 == "q8_0" { printf "%d %d\n", $1 + 0.5, $2 + 0.5 }' \
  "$work/points.tsv")
[ -n "${x:-}" ] || { echo "points.tsv has no point of snapkv at 25% with q8_0"; exit 3; }
window=$(xdotool search --name '^kvscope$' | head -n 1)
[ -n "$window" ] || { echo "xdotool finds no window named kvscope"; exit 3; }
xdotool mousemove --window "$window" "$x" "$y"
touch "$work/hovered"
wait_for "$work/hover.txt"
xdotool click 1
touch "$work/clicked"
wait "$gui"
DRIVER

window_log="$work/gui.log"
kvscope="$kvscope" work="$work" timeout 300 xvfb-run -a -s "-screen 0 1280x800x24" bash "$work/driver.sh" \
  > "$work/driver.log" 2>&1 || { cat "$work/driver.log" >&2; fail "the window or its pointer driver failed"; }

# Hovering: the read-out names the point under the real pointer.
grep -q "^hover: snapkv @q8_0 at 25%: kl_mean = 0.37 .*click: run policy snapkv, budget 25%, q8_0 cache live" \
  "$work/hover.txt" || { cat "$work/hover.txt" >&2; fail "hovering the point did not show its read-out"; }
grep -q "^run: " "$work/hover.txt" && { cat "$work/hover.txt" >&2; fail "a run started before the click"; }
# Clicking: that run started live, finished, and is the run shown.
grep -q "^status: started snapkv at 25% with a q8_0 cache live (Pareto point)$" "$work/after.txt" ||
  { cat "$work/after.txt" >&2; fail "the click did not start the point's run"; }
grep -Pq "^run: snapkv_b25pct_q8_0\tlive\tdone\tshown$" "$work/after.txt" ||
  { cat "$work/after.txt" >&2; fail "no finished snapkv_b25pct_q8_0 run shown after the click"; }
echo "ok: the real pointer's hover named the Pareto point and its click ran snapkv at 25% with a q8_0 cache"
