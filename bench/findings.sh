#!/usr/bin/env bash
# The sweeps behind docs/findings.md: the papers' claims checked on the default model as fidelity to the full
# cache on one 536-token prompt (sample_data/prompts_long/river_town.txt), 8 teacher-forced tokens. Small on
# purpose (it ran on a shared 2-core machine); widen with PROMPTS=sample_data/prompts_long NEW_TOKENS=32.
# Resumable: run again to finish an interrupted sweep. Usage: bench/findings.sh [build] [out]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kv="$root/${1:-build}/app/kvscope"
out="${2:-$root/findings}"
prompts=(--prompt-file "$root/sample_data/prompts_long/river_town.txt")
[ -n "${PROMPTS:-}" ] && prompts=(--prompts "$PROMPTS")
common=(--eval fidelity "${prompts[@]}" --max-new-tokens "${NEW_TOKENS:-8}" --workers "${WORKERS:-1}")
"$kv" sweep "${common[@]}" --out "$out/caote" --policies h2o,caote --budgets 5%,10%
"$kv" sweep "${common[@]}" --out "$out/cake" --policies cake,snapkv,pyramidkv --budgets 10%
"$kv" sweep "${common[@]}" --out "$out/kvmerger" --policies kvmerger,h2o --budgets 35%,50%
"$kv" sweep "${common[@]}" --out "$out/d2o" --budgets 10% \
  --policies "h2o,d2o,d2o:threshold=fixed,fixed_threshold=2,d2o:variance_norm=uniform"
"$kv" sweep "${common[@]}" --out "$out/dynamickv" --policies dynamickv,snapkv,pyramidkv --budgets 8%
"$kv" sweep "${common[@]}" --out "$out/cake_mode" --policies cake:mode=cascade,cake:mode=oneshot --budgets 10%
