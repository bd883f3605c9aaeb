import csv, collections, sys
# Usage: front_table.py SWEEP_DIR (its rows.csv); prompts with all 60 cells only.
rows = list(csv.DictReader(open(sys.argv[1] + '/rows.csv')))
by_prompt = collections.Counter(r['prompt'] for r in rows)
complete = {p for p, n in by_prompt.items() if n == 60}
rows = [r for r in rows if r['prompt'] in complete]
print('complete prompts', len(complete), 'rows', len(rows))
cells = collections.defaultdict(list)
for r in rows:
    cells[(r['policy'], r['cache_type'], r['budget'])].append(r)
pts = {}
for (p, t, b), rs in cells.items():
    if p == 'full' and b != '50%':
        continue
    key = (p, t, '100%' if p == 'full' else b)
    mean = lambda k: sum(float(r[k]) for r in rs) / len(rs)
    pts[key] = (mean('cache_bytes'), mean('kl_mean'), mean('top1_agreement'), len(rs))
def front(pts):
    out = set()
    for k, (b, q, _, _) in pts.items():
        if not any(b2 <= b and q2 <= q and (b2 < b or q2 < q) for k2, (b2, q2, _, _) in pts.items() if k2 != k):
            out.add(k)
    return out
fr = front(pts)
full = pts[('full', 'f16', '100%')][0]
print('| policy | tokens | cache | bytes (KiB) | share of f16 full | KL mean | top-1 | front |')
print('|---|---|---|---|---|---|---|---|')
for k in sorted(pts, key=lambda k: pts[k][0]):
    b, q, t1, n = pts[k]
    print(f'| {k[0]} | {k[2]} | {k[1].split(":")[0]} | {b/1024:.0f} | {b/full:.3f} | {q:.4f} | {t1:.3f} | {"*" if k in fr else ""} |')
