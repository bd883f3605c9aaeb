#!/usr/bin/env bash
# Damaged files at scale (issue 24): 10 000 seeded mutants of each of four formats through the real executable,
# one format after another at nice 10 (tests/fuzz/mutation_harness.py --mode long):
#   trace        damaged traces into `kvscope inspect` and `kvscope figure` (every mutant) and the window's
#                open (`kvscope gui --script`, the first 300)
#   gguf         a tiny GGUF model into `kvscope generate --max-new-tokens 2`
#   safetensors  a tiny Hugging Face folder's model.safetensors (header length, JSON header) into generate
#   tokenizer    the same folder's tokenizer.json (byte-level and structure-aware edits) into generate
# Prints each format's counts as it finishes, then one table: crashes, hangs, clean errors, successes and
# leftover processes (still alive 2 s after their command returned or was killed: must be 0) per command.
# Exits 1 when any crash, hang or leftover was seen (those mutants are kept in $KEEP), or when the executable
# changed during a format's run (a rebuild: its counts mix builds). Nothing may rebuild build/ meanwhile.
#
# Takes about 28 minutes with 2 jobs on an otherwise idle 2-core machine (2026-11-25: trace 21.5 min, gguf 3,
# safetensors 1.5, tokenizer 2; docs/benchmarks.md, "Damaged files at scale"). The window's runs need Xvfb.
#
# Usage: bench/fuzz_long.sh [build] [out]   (default build/, out: a new folder under /tmp with one JSON per format)
#   MUTANTS=2000 fewer mutants per format; GUI_MUTANTS=N window runs; JOBS=2 commands at a time; SEED=15;
#   KEEP=/tmp/kvscope_fuzz_long_failures
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kv="$root/${1:-build}/app/kvscope"
out="${2:-$(mktemp -d /tmp/kvscope_fuzz_long.XXXXXX)}"
py="$root/.deps/venv/bin/python"
keep="${KEEP:-/tmp/kvscope_fuzz_long_failures}"
mkdir -p "$out"
extra=()
[ -n "${MUTANTS:-}" ] && extra+=(--mutants "$MUTANTS")
[ -n "${GUI_MUTANTS:-}" ] && extra+=(--gui-mutants "$GUI_MUTANTS")
status=0
echo "fuzz_long: $kv at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), results in $out"
for format in trace gguf safetensors tokenizer; do
  t0=$(date +%s)
  echo "== $format (started $(date -u +%H:%M:%S) UTC)"
  rm -f "$out/$format.json"
  nice -n 10 "$py" "$root/tests/fuzz/mutation_harness.py" --kvscope "$kv" --format "$format" --mode long \
    --jobs "${JOBS:-2}" --seed "${SEED:-15}" --keep "$keep" --json "$out/$format.json" "${extra[@]}" || status=1
  echo $(( $(date +%s) - t0 )) > "$out/$format.wall"
  echo "== $format: $(cat "$out/$format.wall") s"
done

"$py" - "$out" <<'EOF' || status=1
import json, os, sys
out = sys.argv[1]
print(f"\n| format | command | mutants | crashes | hangs | clean errors | successes | leftover processes | wall |")
print("|---|---|---|---|---|---|---|---|---|")
bad = 0
for fmt in ["trace", "gguf", "safetensors", "tokenizer"]:
    wall = open(os.path.join(out, fmt + ".wall")).read().strip() if os.path.exists(os.path.join(out, fmt + ".wall")) else "?"
    path = os.path.join(out, fmt + ".json")
    if not os.path.exists(path):
        print(f"| {fmt} | (no result: the harness failed before counting) | | | | | | | {wall} s |")
        bad += 1
        continue
    result = json.load(open(path))
    if result.get("binary_changed"):
        print(f"| {fmt} | (not valid: the executable changed during the run) | | | | | | | {wall} s |")
        bad += 1
    for target, c in result["targets"].items():
        print(f"| {fmt} | {target} | {c['mutants']} | {c['crash']} | {c['hang']} | {c['clean']} | {c['success']} | "
              f"{c['leftover']} | {wall} s |")
        bad += c["crash"] + c["hang"] + c["leftover"]
print(f"\nfuzz_long: {'FAILED: ' + str(bad) + ' crashes, hangs, leftovers or invalid runs' if bad else 'no crash, hang or leftover'}")
sys.exit(1 if bad else 0)
EOF
exit $status
