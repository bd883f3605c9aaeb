#!/usr/bin/env bash
# docs/findings.md's claims with intervals: the six comparisons of bench/findings.sh on many prompts
# (bench/make_findings_prompts.py: 300-word windows of the project's prose), each sweep's summary giving the
# paired difference of every policy to the claim's comparison policy (--baseline) with a 95 % bootstrap
# interval; then RULER at LENGTH tokens for the same policies against the full cache. Resumable: run again to
# finish. Usage: bench/findings_intervals.sh [build] [out]   (WORKERS, NEW_TOKENS, LENGTH, SAMPLES, TASKS)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kv="$root/${1:-build}/app/kvscope"
out="${2:-$root/findings_intervals}"
prompts="$out/prompts"
[ -d "$prompts" ] || python3 "$root/bench/make_findings_prompts.py" "$prompts"
common=(--eval fidelity --prompts "$prompts" --max-new-tokens "${NEW_TOKENS:-8}" --workers "${WORKERS:-2}")
"$kv" sweep "${common[@]}" --out "$out/caote" --policies h2o,caote --budgets 5%,10% --baseline h2o
"$kv" sweep "${common[@]}" --out "$out/cake" --policies cake,snapkv,pyramidkv --budgets 10% --baseline snapkv
"$kv" sweep "${common[@]}" --out "$out/kvmerger" --policies kvmerger,h2o --budgets 35%,50% --baseline h2o
"$kv" sweep "${common[@]}" --out "$out/d2o" --budgets 10% --baseline h2o \
  --policies "h2o,d2o,d2o:threshold=fixed,fixed_threshold=2,d2o:variance_norm=uniform"
"$kv" sweep "${common[@]}" --out "$out/dynamickv" --policies dynamickv,snapkv,pyramidkv --budgets 8% --baseline snapkv
"$kv" sweep "${common[@]}" --out "$out/cake_mode" --policies cake:mode=cascade,cake:mode=oneshot --budgets 10% \
  --baseline cake:mode=oneshot
"$kv" sweep --eval ruler --length "${LENGTH:-1024}" --samples "${SAMPLES:-17}" \
  --tasks "${TASKS:-niah_single_2,niah_multikey_1,vt}" --workers "${WORKERS:-2}" --out "$out/ruler" \
  --policies full,h2o,caote,snapkv,pyramidkv,cake,kvmerger,d2o,dynamickv --budgets 25%
