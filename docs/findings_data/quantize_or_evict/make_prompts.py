"""The 50 prompts of docs/findings.md's "Quantize or evict?": 180-word chunks, the 27 disjoint ones of
sample_data/texts, then 23 of the prose paragraphs of Python's own documentation (the standard library's
pydoc_data.topics, Python 3.11.x: another version has other text), every 7th 180-word chunk.
Usage: python3 make_prompts.py OUT_DIR   (writes chunk_00.txt ... chunk_49.txt)"""
import glob
import os
import re
import sys

import pydoc_data.topics

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
texts = sorted(glob.glob(os.path.join(here, "..", "..", "..", "sample_data", "texts", "*.txt")))
words = sum((open(f).read().split() for f in texts), [])
chunks = [" ".join(words[i:i + 180]) for i in range(0, len(words) - 179, 180)]
prose = []
for key in sorted(pydoc_data.topics.topics):
    for paragraph in pydoc_data.topics.topics[key].split("\n\n"):
        line = " ".join(paragraph.split())
        if len(line.split()) >= 30 and not re.search(r"[{}<>=\[\]`|]|\.\.\.|>>>", line):
            prose.append(line)
prose_words = " ".join(prose).split()
start = 0
while len(chunks) < 50:
    chunks.append(" ".join(prose_words[start:start + 180]))
    start += 180 * 7
for n, chunk in enumerate(chunks):
    with open(os.path.join(out, f"chunk_{n:02d}.txt"), "w") as f:
        f.write(chunk)
