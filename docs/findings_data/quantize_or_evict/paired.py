import csv, sys, collections
import numpy as np
rows = list(csv.DictReader(open(sys.argv[1] + '/rows.csv')))
kl = collections.defaultdict(dict)
for r in rows:
    t = r['cache_type'].split(':')[0]
    b = '100%' if r['policy'] == 'full' else r['budget']
    kl[(r['policy'], b, t)][r['prompt']] = float(r['kl_mean'])
pairs = [(('h2o', '50%', 'q8_0'), ('h2o', '25%', 'f16')), (('h2o', '25%', 'q8_0'), ('h2o', '10%', 'f16')),
         (('h2o', '50%', 'q8_0'), ('full', '100%', 'q4_0')), (('snapkv', '50%', 'q8_0'), ('snapkv', '25%', 'f16')),
         (('cake', '50%', 'q8_0'), ('cake', '25%', 'f16')), (('h2o', '25%', 'q8_0'), ('snapkv', '50%', 'q4_0')),
         (('h2o', '25%', 'q8_0'), ('h2o', '50%', 'q4_0')), (('h2o', '25%', 'q4_0'), ('h2o', '10%', 'q8_0')),
         (('cake', '50%', 'q8_0'), ('snapkv', '50%', 'q8_0')), (('full', '100%', 'q8_0'), ('cake', '50%', 'f16'))]
rng = np.random.default_rng(0)
for a, b in pairs:
    ps = sorted(set(kl[a]) & set(kl[b]))
    d = np.array([kl[a][p] - kl[b][p] for p in ps])
    boot = np.array([d[rng.integers(0, len(d), len(d))].mean() for _ in range(2000)])
    print(f"{' '.join(a)} vs {' '.join(b)}: KL {np.mean([kl[a][p] for p in ps]):.4f} vs {np.mean([kl[b][p] for p in ps]):.4f}, "
          f"difference {d.mean():+.4f} [{np.percentile(boot, 2.5):+.4f}, {np.percentile(boot, 97.5):+.4f}], lower on {int((d < 0).sum())} of {len(d)}")
