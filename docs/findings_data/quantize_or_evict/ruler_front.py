"""The RULER half of "Quantize or evict?" (docs/findings.md), read back from a sweep folder's rows.csv.

    python3 ruler_front.py SWEEP_DIR

Prints, per (policy, kept tokens, cache type): the mean real bytes at the end of the run as a share of the f16
full cache's, the mean RULER score over all samples and over the samples the float32 full cache answered
(`full_score` >= 0.5), each with a 95 % bootstrap interval over samples, and whether the cell is on the Pareto
front (no other cell has as few bytes and as high a mean score, one of them strictly); then paired
comparisons of cells at about the same bytes. The full cache at every budget is one cell, listed as 100 %.
Only samples with every cell of the grid are used.
"""
import collections
import csv
import sys

import numpy as np

rows = list(csv.DictReader(open(sys.argv[1] + "/rows.csv")))
per_sample = collections.Counter(r["prompt"] for r in rows)
cells_per_sample = max(per_sample.values())
complete = {p for p, n in per_sample.items() if n == cells_per_sample}
rows = [r for r in rows if r["prompt"] in complete]
samples = sorted(complete)
print(f"samples with all {cells_per_sample} cells: {len(samples)}; rows: {len(rows)}")

score = collections.defaultdict(dict)  # (policy, tokens, type) -> sample -> score
nbytes = collections.defaultdict(dict)
answered = {}  # sample -> whether the float32 full cache answered it
for r in rows:
    key = (r["policy"], "100%" if r["policy"] == "full" else r["budget"], r["cache_type"])
    score[key][r["prompt"]] = float(r["score"])
    nbytes[key][r["prompt"]] = float(r["cache_bytes"])
    answered[r["prompt"]] = float(r["full_score"]) >= 0.5
easy = [s for s in samples if answered[s]]

rng = np.random.default_rng(0)


def interval(values):
    v = np.asarray(values, dtype=float)
    boot = v[rng.integers(0, len(v), (2000, len(v)))].mean(axis=1)
    return v.mean(), np.percentile(boot, 2.5), np.percentile(boot, 97.5)


full_bytes = np.mean([nbytes[("full", "100%", "f16")][s] for s in samples])
points = {k: (np.mean([nbytes[k][s] for s in samples]), np.mean([score[k][s] for s in samples])) for k in score}
front = {
    k
    for k, (b, q) in points.items()
    if not any(b2 <= b and q2 >= q and (b2 < b or q2 > q) for k2, (b2, q2) in points.items() if k2 != k)
}
print(f"f16 full cache: {full_bytes / 1024:.0f} KiB on average; the float32 full cache answered {len(easy)} of {len(samples)}")
print("| policy | tokens | cache | share of f16 full bytes | score, all samples | score, samples the full cache answered | front |")
print("|---|---|---|---|---|---|---|")
for k in sorted(points, key=lambda k: (points[k][0], -points[k][1])):
    m, lo, hi = interval([score[k][s] for s in samples])
    me, loe, hie = interval([score[k][s] for s in easy])
    print(f"| {k[0]} | {k[1]} | {k[2].split(':')[0]} | {points[k][0] / full_bytes:.3f} | {m:.3f} [{lo:.3f}, {hi:.3f}] | "
          f"{me:.3f} [{loe:.3f}, {hie:.3f}] | {'*' if k in front else ''} |")

# Quantize or evict at about the same bytes: each pair is (fewer tokens, quantized) or (all tokens,
# quantized) against (fewer tokens at f16), on the same samples.
KIVI = next((k[2] for k in score if k[2].startswith("kivi2")), "kivi2")
pairs = [
    (("snapkv", "50%", "q8_0"), ("snapkv", "25%", "f16")),
    (("h2o", "50%", "q8_0"), ("h2o", "25%", "f16")),
    (("cake", "50%", "q8_0"), ("cake", "25%", "f16")),
    (("dynamickv", "50%", "q8_0"), ("dynamickv", "25%", "f16")),
    (("full", "100%", "q4_0"), ("snapkv", "25%", "f16")),
    (("full", "100%", "q4_0"), ("cake", "25%", "f16")),
    (("full", "100%", "q8_0"), ("snapkv", "50%", "f16")),
    (("full", "100%", "q8_0"), ("cake", "50%", "f16")),
    (("full", "100%", KIVI), ("snapkv", "25%", "f16")),
    (("snapkv", "50%", "q4_0"), ("snapkv", "25%", "q8_0")),
    (("snapkv", "25%", "q8_0"), ("snapkv", "10%", "f16")),
]
print()
print("| comparison (about the same bytes) | bytes (share) | score | difference [95 %] | higher / lower on |")
print("|---|---|---|---|---|")
for a, b in pairs:
    if a not in score or b not in score:
        continue
    d = np.array([score[a][s] - score[b][s] for s in samples])
    m, lo, hi = interval(d)
    print(f"| {' '.join(a).replace(KIVI, 'kivi2')} vs {' '.join(b)} | {points[a][0] / full_bytes:.2f} vs "
          f"{points[b][0] / full_bytes:.2f} | {points[a][1]:.3f} vs {points[b][1]:.3f} | {m:+.3f} [{lo:+.3f}, {hi:+.3f}] | "
          f"{int((d > 0).sum())} / {int((d < 0).sum())} of {len(d)} |")
