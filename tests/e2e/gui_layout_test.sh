#!/usr/bin/env bash
# End-to-end (issue 38, item 10): the window's layout persists between sessions in Dear ImGui's ini file (--ini):
# a panel closed in one session is closed in the next, whose layout is read from the file instead of rebuilt; a
# window resized to 1280x720 and back still draws its panels. Needs no model run. Exit 77 = skipped.
set -euo pipefail
kvscope="${1:?usage: gui_layout_test.sh path/to/kvscope}"
needs="xvfb-run identify"
source "$(dirname "$0")/gui_test_prelude.sh"
window_log="$work/out.txt"
ini="$work/layout/imgui.ini"  # in a folder that does not exist yet

cat > "$work/first.kvs" <<SCRIPT
frames 3
panel similarity off
resize 1280 720
frames 4
screenshot $work/small.png
resize 1600 1000
frames 4
screenshot $work/big.png
quit
SCRIPT
timeout 300 xvfb-run -a -s "-screen 0 1600x1000x24" "$kvscope" gui --no-run --ini "$ini" --script "$work/first.kvs" \
  > "$window_log" 2>&1 || fail "the first session exited with $?"
check_png "$work/small.png" 1280 720 8
check_png "$work/big.png" 1600 1000 8
[ -s "$ini" ] || fail "no ini file was written at $ini"
grep -q '^\[KvscopePanels\]\[open\]' "$ini" || fail "the ini file has no open-panels section"
grep -q '^similarity=0' "$ini" || fail "the closed Similarity panel is not recorded as closed"
grep -q '^attention=1' "$ini" || fail "the open Attention panel is not recorded as open"
grep -q '^\[Docking\]' "$ini" || fail "the ini file holds no docking layout"
grep -q "layout read from" "$window_log" && fail "the first session read a layout although none was saved"

cat > "$work/second.kvs" <<SCRIPT
frames 4
screenshot $work/second.png
quit
SCRIPT
timeout 300 xvfb-run -a -s "-screen 0 1600x1000x24" "$kvscope" gui --no-run --ini "$ini" --script "$work/second.kvs" \
  > "$window_log" 2>&1 || fail "the second session exited with $?"
grep -q "layout read from $ini" "$window_log" || fail "the second session did not read the saved layout"
grep -q '^similarity=0' "$ini" || fail "the second session did not keep Similarity closed"
check_png "$work/second.png" 1600 1000 8
grep -Eq '^layout_size=1600x[0-9]+$' "$ini" || fail "the ini file does not say the window size its layout is for"

# A third session in a smaller window reads the layout saved at 1600x1000 and scales it, as a resize would.
cat > "$work/third.kvs" <<SCRIPT
frames 4
screenshot $work/third.png
quit
SCRIPT
timeout 300 xvfb-run -a -s "-screen 0 1600x1000x24" "$kvscope" gui --no-run --width 1280 --height 720 --ini "$ini" \
  --script "$work/third.kvs" > "$window_log" 2>&1 || fail "the third session exited with $?"
grep -q "layout read from $ini" "$window_log" || fail "the third session did not read the saved layout"
grep -Eq "the layout was saved at 1600x[0-9]+; scaled to 1280x[0-9]+" "$window_log" ||
  fail "the third session did not scale the layout saved at 1600x1000 to its 1280x720 window"
check_png "$work/third.png" 1280 720 8
grep -Eq '^layout_size=1280x[0-9]+$' "$ini" || fail "the third session did not save its own window size"
echo "ok: layout and open panels persisted in $ini across two sessions; resized to 1280x720 and back; read at 1280x720"
