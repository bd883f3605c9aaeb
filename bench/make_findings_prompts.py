#!/usr/bin/env python3
"""Prompts for the findings re-run (docs/findings.md, "With intervals"): windows of WORDS words taken every
STRIDE words from the project's own prose (sample_data/texts, sample_data/prompts_long, bench/prompts), one
file per window. Neighbouring windows overlap (STRIDE < WORDS), so the prompts are not independent draws:
the bootstrap intervals over them are, if anything, too narrow; docs/findings.md says so.

    python3 bench/make_findings_prompts.py OUT_DIR [--words 300] [--stride 80]
"""
import argparse
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = ["sample_data/texts", "sample_data/prompts_long", "bench/prompts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--words", type=int, default=300)
    ap.add_argument("--stride", type=int, default=80)
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for source in SOURCES:
        for path in sorted((ROOT / source).glob("*.txt")):
            words = path.read_text(encoding="utf-8").split()
            for start in range(0, max(1, len(words) - args.words + 1), args.stride):
                chunk = words[start:start + args.words]
                if len(chunk) < args.words // 2:
                    continue
                (out / f"{path.stem}_{start:05d}.txt").write_text(" ".join(chunk) + "\n", encoding="utf-8")
                n += 1
    print(f"wrote {n} prompts to {out}")


if __name__ == "__main__":
    main()
