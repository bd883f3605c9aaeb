"""`kvscope sweep --eval ruler` records evidence retention (issue 35) the way `kvscope eval ruler` does, and every
number of its tables is recomputed here from the files it wrote:
  - rows.csv's evidence_kept, evidence_kept_min_layer and evidence_lost equal, sample by sample, the records of
    `kvscope eval ruler --json` on the same samples (another command path: no sweep store, no worker processes);
  - the full cache keeps all of it; StreamingLLM with 32 tokens (a 4-token sink and the prompt's end) keeps none
    of a needle in the middle of a 512-token prompt;
  - eval.h5's /eval/evidence_layer_kept (rows x layers) averages to evidence_kept and its least layer is
    evidence_kept_min_layer; evidence.jsonl holds one line per cell;
  - retention.json's 2 x 2 counts equal the counts recomputed from rows.csv (correct: score >= 0.5; lost:
    evidence_lost 1);
  - resuming the finished sweep (after a torn last line in evidence.jsonl) runs nothing and keeps every layer's
    retention in eval.h5.
"""
import csv
import json
import math
import os
import subprocess
import sys

import h5py
import numpy as np

from checks import check, run_in_temp_folder

BINARY = os.environ.get("KVSCOPE_BINARY")
TASKS = "niah_single_1,niah_multikey_1"
RULER = ["--length", "512", "--samples", "1", "--tasks", TASKS]
POLICIES = ["full", "streaming_llm"]
BUDGET = "32"
METRICS = ["evidence_kept", "evidence_kept_min_layer", "evidence_lost"]


def sweep(out):
    return subprocess.run([BINARY, "sweep", "--eval", "ruler", *RULER, "--policies", ",".join(POLICIES), "--budgets",
                           BUDGET, "--workers", "2", "--out", out], capture_output=True, text=True, timeout=1800)


def rows_of(out):
    with open(os.path.join(out, "rows.csv"), newline="") as f:
        return list(csv.DictReader(f))


def body(folder):
    out = os.path.join(folder, "sweep")
    r = sweep(out)
    check(r.returncode == 0, f"the sweep runs (rc {r.returncode}: {r.stderr[-800:]})")
    if r.returncode != 0:
        return
    rows = rows_of(out)
    check(len(rows) == 4, f"2 samples x 2 policies give 4 rows (got {len(rows)})")
    by_key = {(row["prompt"], row["policy"]): row for row in rows}

    # The same samples through `kvscope eval ruler`.
    for policy in POLICIES:
        e = subprocess.run([BINARY, "eval", "ruler", *RULER, "--policy", policy, "--budget", BUDGET, "--json"],
                           capture_output=True, text=True, timeout=1800)
        check(e.returncode == 0, f"eval ruler {policy} runs ({e.stderr[-400:]})")
        if e.returncode != 0:
            continue
        for record in json.loads(e.stdout)["records"]:
            row = by_key.get((f"{record['task']}#{record['index']}", policy))
            check(row is not None, f"the sweep has {record['task']}#{record['index']} under {policy}")
            if row is None:
                continue
            expected = {"evidence_kept": record["evidence_kept"],
                        "evidence_kept_min_layer": record["evidence_kept_min_layer"]["kept"],
                        "evidence_lost": 1.0 if record["evidence_mostly_lost"] else 0.0}
            for name, value in expected.items():
                check(math.isclose(float(row[name]), value, abs_tol=1e-12),
                      f"{policy} {row['prompt']} {name}: sweep {row[name]}, eval ruler {value}")
            check(float(row["score"]) == record["score"], f"{policy} {row['prompt']}: the same score in both")

    for row in rows:
        kept = float(row["evidence_kept"])
        if row["policy"] == "full":
            check(kept == 1.0 and float(row["evidence_lost"]) == 0.0, f"full keeps all evidence ({row})")
        else:
            check(kept == 0.0 and float(row["evidence_lost"]) == 1.0,
                  f"streaming_llm at {BUDGET} tokens keeps none of a mid-prompt needle (kept {kept})")

    with h5py.File(os.path.join(out, "eval.h5"), "r") as f:
        layers = f["eval/evidence_layer_kept"][:]
        cells = f["eval/cell"][:]
    by_cell = {int(row["cell"]): row for row in rows}
    check(layers.shape == (4, 30), f"evidence_layer_kept is rows x layers (shape {layers.shape})")
    for i, cell in enumerate(cells):
        row = by_cell[int(cell)]
        check(math.isclose(float(np.mean(layers[i])), float(row["evidence_kept"]), abs_tol=1e-12),
              f"cell {cell}: the layers' mean {np.mean(layers[i])} is evidence_kept {row['evidence_kept']}")
        check(math.isclose(float(np.min(layers[i])), float(row["evidence_kept_min_layer"]), abs_tol=1e-12),
              f"cell {cell}: the least layer {np.min(layers[i])} is evidence_kept_min_layer")
    with open(os.path.join(out, "evidence.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    check(sorted(line["cell"] for line in lines) == sorted(by_cell), "evidence.jsonl has one line per cell")

    with open(os.path.join(out, "retention.json")) as f:
        table = json.load(f)
    names = {(0, 0): "kept_wrong", (0, 1): "kept_correct", (1, 0): "lost_wrong", (1, 1): "lost_correct"}
    check(len(table["cells"]) == len(POLICIES), f"one 2 x 2 per (policy, budget) ({len(table['cells'])})")
    for cell in table["cells"]:
        mine = [row for row in rows if row["policy"] == cell["policy"] and row["budget"] == cell["budget"]]
        for (lost, correct), name in names.items():
            count = sum(1 for row in mine if (float(row["evidence_lost"]) == 1.0) == bool(lost)
                        and (float(row["score"]) >= 0.5) == bool(correct))
            check(cell["cells"][name]["count"] == count,
                  f"{cell['policy']} {name}: retention.json {cell['cells'][name]['count']}, recomputed {count}")
    check(os.path.exists(os.path.join(out, "retention_by_layer_b32.png")), "the by-layer figure is written")

    with open(os.path.join(out, "evidence.jsonl"), "a") as f:
        f.write('{"cell": 0, "layer_ke')  # a kill in the middle of a line
    again = sweep(out)
    check(again.returncode == 0 and "0 to run" in again.stderr,
          f"resuming the finished sweep runs nothing ({again.returncode}: {again.stderr[-400:]})")
    with h5py.File(os.path.join(out, "eval.h5"), "r") as f:
        check(np.array_equal(f["eval/evidence_layer_kept"][:], layers),
              "after resuming, eval.h5 still holds every layer's retention")


if __name__ == "__main__":
    sys.exit(run_in_temp_folder(BINARY, "kvscope-sweep-retention-", body))
