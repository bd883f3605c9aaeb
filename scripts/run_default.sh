#!/usr/bin/env bash
# The main job on the default model and sample prompt: the window when a display is available,
# otherwise the same run on the command line.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-build}"
bin="$root/$build/app/kvscope"
prompt="$root/sample_data/prompts/lighthouse_story.txt"
if [ -n "${DISPLAY:-}" ] && "$bin" gui --help >/dev/null 2>&1; then
  exec "$bin" gui
fi
echo "kvscope: no display; running the default job on the command line" >&2
"$bin" generate --prompt-file "$prompt" --policy snapkv --budget 50% --max-new-tokens 64
echo "kvscope: what that policy costs against the full cache (teacher-forced on the full cache's continuation):" >&2
exec "$bin" eval fidelity --prompt-file "$prompt" --policy snapkv --budget 50% --max-new-tokens 32
