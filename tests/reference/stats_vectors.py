#!/usr/bin/env python3
"""Reference vectors for src/stats, computed independently of the Rust code.

Run: python3 tests/reference/stats_vectors.py   (numpy 2.4.6, scipy 1.17.1 from PyPI)

- Quantiles: a direct Python transcription of the definition in docs/cgmon.md, "Quantiles"
  (gonum stat.Quantile: Empirical and LinInterp), sorting by value and then weight.
- Weighted Pearson: numpy.cov with aweights.
- Spearman: scipy.stats.spearmanr (unweighted); weighted = weighted Pearson of weighted
  mid-ranks (the definition src/stats/correlation.rs documents).
- p-values: scipy.stats.pearsonr / spearmanr (unweighted); weighted: two-sided Student t with
  the Kish effective sample size n_eff = (sum w)^2 / sum w^2 and n_eff - 2 degrees of freedom.
"""
import numpy as np
from scipy import stats

P = [0.02, 0.09, 0.25, 0.5, 0.75, 0.91, 0.98]


def quantile(p, xs, ws, kind):
    ws = ws if ws is not None else [1.0] * len(xs)
    order = sorted(range(len(xs)), key=lambda i: (xs[i], ws[i]))  # ties by weight
    x = [xs[i] for i in order]
    w = [ws[i] for i in order]
    f = p * sum(w)
    cum = 0.0
    for i in range(len(x)):
        cum += w[i]
        if cum >= f:
            if kind == "empirical" or i == 0:
                return x[i]
            t = (cum - f) / w[i]
            return t * x[i - 1] + (1 - t) * x[i]
    return x[-1]


def wpearson(x, y, w):
    c = np.cov(np.array([x, y]), aweights=w)
    return c[0, 1] / np.sqrt(c[0, 0] * c[1, 1])


def wranks(x, w):
    x = np.asarray(x, float)
    w = np.asarray(w, float)
    r = np.empty(len(x))
    for v in np.unique(x):
        tie = x == v
        r[tie] = w[x < v].sum() + w[tie].sum() / 2
    return r


def wp(r, w):
    w = np.asarray(w, float)
    n_eff = w.sum() ** 2 / (w * w).sum()
    df = n_eff - 2
    t = r * np.sqrt(df / (1 - r * r))
    return 2 * stats.t.sf(abs(t), df), n_eff


x = [12.0, 3.5, 7.25, 3.5, 20.0, 9.0, 15.5, 1.0]
w = [1.0, 2.0, 0.5, 1.5, 3.0, 1.0, 0.25, 2.75]
tx = [1.0, 2.0, 2.0, 3.0, 1.0, 3.0, 3.0]
tw = [0.5, 1.0, 3.0, 0.25, 2.0, 1.0, 0.75]
print("quantile ties weighted lininterp:", [round(quantile(p, tx, tw, "lininterp"), 12) for p in P])
for ws, name in [(None, "unweighted"), (w, "weighted")]:
    for kind in ["lininterp", "empirical"]:
        print(f"quantile {name} {kind}:", [round(quantile(p, x, ws, kind), 12) for p in P])

cx = [10.0, 12.0, 9.0, 15.0, 14.0, 11.0, 18.0, 16.0, 13.0, 17.0]
cy = [2.0, 2.5, 1.0, 4.0, 3.0, 2.5, 5.5, 4.0, 3.5, 4.5]
cw = [1.0, 0.5, 2.0, 1.0, 3.0, 1.0, 0.5, 1.5, 1.0, 2.0]
print("pearson unweighted:", repr(stats.pearsonr(cx, cy).statistic), "p", repr(stats.pearsonr(cx, cy).pvalue))
print("spearman unweighted:", repr(stats.spearmanr(cx, cy).statistic), "p", repr(stats.spearmanr(cx, cy).pvalue))
r = wpearson(cx, cy, cw)
print("pearson weighted:", repr(r), "p, n_eff", [repr(v) for v in wp(r, cw)])
rs = wpearson(wranks(cx, cw), wranks(cy, cw), cw)
print("spearman weighted:", repr(rs), "p, n_eff", [repr(v) for v in wp(rs, cw)])
