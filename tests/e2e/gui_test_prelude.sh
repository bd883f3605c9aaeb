# Sourced by the window's end-to-end scripts (gui_*_test.sh) after they set `kvscope` and `needs` (the tools
# besides kvscope they run): skips (exit 77) without those tools or without a default model, makes `$work`
# (removed at exit), and defines `fail` (which also prints `$window_log` when the script set it) and `check_png`.
for tool in $needs; do
  command -v "$tool" >/dev/null || { echo "skip: $tool not installed"; exit 77; }
done
if ! "$kvscope" info >/dev/null 2>&1; then echo "skip: kvscope info fails (no default model?)"; exit 77; fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
window_log=""
fail() {
  echo "FAIL: $*" >&2
  if [ -n "$window_log" ]; then echo "--- window output:" >&2; cat "$window_log" >&2 || true; fi
  exit 1
}

# check_png FILE WIDTH HEIGHT MIN_COLOURS: the picture is a real rendering (a blank or failed window has a handful
# of colours).
check_png() {
  [ -s "$1" ] || fail "$1 was not written"
  read -r w h k < <(identify -format '%w %h %k\n' "$1")
  [ "$w" = "$2" ] && [ "$h" = "$3" ] || fail "$1 is ${w}x${h}, expected $2x$3"
  [ "$k" -ge "$4" ] || fail "$1 has only $k distinct colours (expected >= $4): not a real rendering"
  echo "ok: $1 ${w}x${h}, $k colours"
}
