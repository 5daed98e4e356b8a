"""`bench parse auroc`: how well each candidate whole-answer score separates passing drafts
from failing ones on the calibration records (a judge is only as good as its discrimination)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import numpy as np

from localspec.bench import humaneval as he
from localspec.bench.parse.common import load, records, say


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """P(score of a passing draft > score of a failing one), ties count half."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return float("nan")
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


def candidate_scores(rec: dict) -> dict[str, float]:
    """Every whole-answer score tried (higher = more trusted)."""
    g = np.asarray(rec["gaps"])
    nll = np.asarray(rec["nll"])
    ent = np.asarray(rec["ent"])
    dn = np.asarray(rec["dnll"])
    out: dict[str, float] = {}
    for name, v in rec["prompt_whole"].items():
        out[f"prompt:{name}"] = v
    out["prompt:code:min-prefix"] = min(rec["prompt_prefix"])
    if g.size == 0:
        return out
    out["lik:max-gap"] = -g.max()
    out["lik:mean-gap"] = -g.mean()
    out["lik:sum-gap"] = -g.sum()
    out["lik:max-nll"] = -nll.max()
    out["lik:mean-nll"] = -nll.mean()
    out["lik:top3-gap"] = -np.sort(g)[-3:].mean()
    for f in (1.0, 2.0, 3.0):
        out[f"lik:sum-gap>{f:g}"] = -np.maximum(g - f, 0).sum()
        out[f"lik:count-gap>{f:g}"] = -float((g > f).sum())
    for e in (0.5, 1.0):
        sel = ent < e
        out[f"lik:max-gap(ent<{e:g})"] = -(g[sel].max() if sel.any() else 0.0)
    out["lik:max(gap-ent)"] = -(g - ent).max()
    agree = np.asarray(rec["agree"])
    out["lik:agree-rate"] = float(agree.mean())
    out["lik:disagreements"] = -float((agree == 0).sum())
    out["lik:max-gap-minus-draft-nll"] = -(g - dn).max() if dn.size == g.size else 0.0
    cuts = rec["cuts"]
    seg = []
    prev = 0
    for c in cuts:
        seg.append(g[prev:c])
        prev = c
    for f in (1.0, 2.0, 3.0):
        out[f"seg:max-sum-gap>{f:g}"] = -max(float(np.maximum(s - f, 0).sum()) for s in seg if s.size)
    out["seg:max-mean-gap"] = -max(float(s.mean()) for s in seg if s.size)
    # hybrids: prompt log-odds minus a multiple of a likelihood statistic (the shipped
    # hybrid uses the segment statistic: seg:max-sum-gap>1)
    for ph in ("tests", "code", "generic"):
        if ph not in rec["prompt_whole"]:
            continue
        pv = min(max(rec["prompt_whole"][ph], 1e-6), 1 - 1e-6)
        lo = math.log(pv / (1 - pv))
        for a in (0.1, 0.25, 0.5, 1.0):
            out[f"hyb:{ph}-{a:g}*seg-sum-gap>1"] = lo + a * out["seg:max-sum-gap>1"]
            out[f"hyb:{ph}-{a:g}*max-gap"] = lo + a * out["lik:max-gap"]
    return out


def auroc_table(recs: list[dict]) -> list[tuple[str, float]]:
    labels = [r["draft"]["pass"] for r in recs]
    cands = [candidate_scores(r) for r in recs]
    names = sorted(set().union(*cands))
    rows = []
    for n in names:
        vals = [c.get(n, float("nan")) for c in cands]
        if any(math.isnan(v) for v in vals):
            continue
        rows.append((n, auroc(vals, labels)))
    rows.sort(key=lambda x: -x[1])
    return rows


def cmd_auroc(args: argparse.Namespace) -> int:
    idx = set(he.parse_range(args.problems))
    recs = [r for r in load(records(args, "calibrate")) if r["index"] in idx]
    if not recs:
        say("no calibration records: run `localspec bench parse calibrate` first")
        return 2
    greedy = [r for r in recs if r.get("sample", 0) == 0]
    for name, rs in (("greedy drafts", greedy), ("greedy + sampled drafts", recs)):
        npass = sum(r["draft"]["pass"] for r in rs)
        print(f"{name}: {len(rs)} answers, {npass} pass, {len(rs) - npass} fail")
    g_tab = dict(auroc_table(greedy))
    print("| score | AUROC greedy | AUROC all |\n|---|---|---|")
    for n, a in auroc_table(recs):
        print(f"| {n} | {g_tab.get(n, float('nan')):.3f} | {a:.3f} |")
    return 0
