"""`bench parse summary` (also printed after `report`): pass@1, time and speedup per method
over the problems every method finished, each judge's AUROC as it ran, and the
perfect-judge bound (what any judge could reach with this draft)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from localspec.bench import humaneval as he
from localspec.bench.parse.common import load, records
from localspec.bench.parse.scores import auroc


def _by_method(recs: list[dict], problems: set[int]) -> dict[str, list[dict]]:
    by: dict[str, list[dict]] = {}
    for r in recs:
        if r["index"] in problems:
            by.setdefault(r["method"], []).append(r)
    return by


def summary_rows(recs: list[dict], problems: Iterable[int]) -> tuple[set[int], list[dict]]:
    """Per method over the problems every method finished: pass@1, time, speedup vs AR."""
    by = _by_method(recs, set(problems))
    common = set.intersection(*[{r["index"] for r in v} for v in by.values()]) if by else set()
    ar = {r["index"]: r for r in by.get("ar", [])}
    ar_secs = sum(ar[i]["seconds"] for i in common if i in ar)
    rows = []
    for m, rs in by.items():
        rs = [r for r in rs if r["index"] in common]
        if not rs:
            continue
        secs = sum(r["seconds"] for r in rs)
        parse_rounds = [x for r in rs if r.get("parse") for x in r["parse"]["rounds"]]
        drafted = sum(x["draft_tokens"] for x in parse_rounds)
        rows.append({
            "method": m, "n": len(rs), "pass_at_1": sum(r["pass"] for r in rs) / len(rs), "seconds": secs,
            "tokens": sum(r["n_tokens"] for r in rs),
            "speedup": ar_secs / secs if secs and ar_secs else float("nan"),
            "rounds": float(np.mean([len(r["parse"]["rounds"]) for r in rs if r.get("parse")])) if drafted else None,
            "accepted_share": sum(x["accepted_tokens"] for x in parse_rounds) / drafted if drafted else None,
        })
    return common, rows


def summarize(args: argparse.Namespace) -> int:
    recs = load(records(args, "report"))
    common, rows = summary_rows(recs, he.parse_range(args.problems))
    print(f"{len(common)} problems ({min(common, default=0)}-{max(common, default=0)}) run by every method")
    print("| method | pass@1 | tokens | seconds | tok/s | speedup vs AR (time) | rounds/answer | accepted/drafted |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        rr = "-" if r["rounds"] is None else f"{r['rounds']:.2f}"
        ad = "-" if r["accepted_share"] is None else f"{r['accepted_share']:.2f}"
        print(f"| {r['method']} | {100 * r['pass_at_1']:.1f}% | {r['tokens']} | {r['seconds']:.1f} | "
              f"{r['tokens'] / r['seconds']:.1f} | {r['speedup']:.2f}x | {rr} | {ad} |")
    by = _by_method(recs, common)
    judge_auroc_table(by, common)
    print_perfect_judge_bound(by, common)
    if getattr(args, "plot", None):
        path = plot_tradeoff(rows, Path(args.plot), f"PARSE {args.tag}: HumanEval {args.problems}")
        if path is not None:
            print(f"\nplot: {path}")
    return 0


def plot_tradeoff(rows: list[dict], path: Path, title: str) -> Path | None:
    """pass@1 vs speedup, one labelled point per method: the tau/gamma sweep at a glance."""
    from localspec.bench.plots import _pyplot

    plt = _pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, r in enumerate(sorted(rows, key=lambda r: r["speedup"])):
        ax.scatter(r["speedup"], 100 * r["pass_at_1"], color="tab:red" if r["method"] == "ar" else "tab:blue")
        # neighbours often share a pass@1 (a few problems decide it): stagger their labels
        ax.annotate(r["method"].removeprefix("parse:"), (r["speedup"], 100 * r["pass_at_1"]), fontsize=7,
                    xytext=(4, (4, -10, 14)[i % 3]), textcoords="offset points")
    ax.set_xlabel("speedup vs target alone (wall clock)")
    ax.set_ylabel("pass@1 (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def judge_auroc_table(by: dict[str, list[dict]], common: set[int]) -> None:
    """Each PARSE setting's first-round score of the whole draft vs that draft's pass/fail.

    The same discrimination measure as `auroc` on the calibration split, but read from the
    judge that actually ran in the report (an evaluation, not a choice: nothing is tuned on
    it)."""
    draft_pass = {r["index"]: r["pass"] for r in by.get("draft", []) if r["index"] in common}
    rows = []
    for m, rs in by.items():
        scores, labels = [], []
        for r in rs:
            if not r.get("parse") or r["index"] not in draft_pass or not r["parse"]["rounds"]:
                continue
            r0 = r["parse"]["rounds"][0]
            if r0["cuts"] and r0["cuts"][-1] == r0["draft_tokens"]:
                scores.append(r0["scores"][-1])
                labels.append(draft_pass[r["index"]])
        if scores:
            rows.append((m, auroc(scores, labels), sum(labels), len(labels) - sum(labels)))
    if rows:
        print("\n| judge (as run) | AUROC of the whole-draft score | drafts passing | failing |")
        print("|---|---|---|---|")
        for m, a, npos, nneg in rows:
            print(f"| {m} | {a:.3f} | {npos} | {nneg} |")


def perfect_judge_bound(
    by: dict[str, list[dict]], common: set[int], regen_speedup: float, slack: float = 0.02
) -> tuple[float, float] | None:
    """The best any judge could do with THIS draft: (pass@1, speedup vs AR).

    Per problem, from measured times: the draft's answer (the `draft` run) plus the
    cheapest judge pass any PARSE setting ran on it (first round); a perfect judge keeps
    every draft that passes or whose target answer fails anyway, and has the target rewrite
    the rest at `regen_speedup` x AR. Then, within `slack` of the target's pass@1, it also
    keeps the failing drafts that save the most time. If even this misses a speed goal, no
    judge can reach it: the draft's accuracy and cost are the limit, not the judge.
    """
    ar = {r["index"]: r for r in by.get("ar", [])}
    dr = {r["index"]: r for r in by.get("draft", [])}
    judge: dict[int, float] = {}
    for m, rs in by.items():
        for r in rs:
            if m.startswith("parse") and r.get("parse") and r["parse"]["rounds"]:
                j = r["parse"]["rounds"][0].get("judge_seconds")
                if j is not None:
                    judge[r["index"]] = min(j, judge.get(r["index"], float("inf")))
    idx = [i for i in sorted(common) if i in ar and i in dr and i in judge]
    if not idx:
        return None
    n = len(idx)
    floor = sum(ar[i]["pass"] for i in idx) / n - slack
    t_ar = sum(ar[i]["seconds"] for i in idx)
    total, passed, savings = 0.0, 0, []
    for i in idx:
        keep = dr[i]["seconds"] + judge[i]
        redo = ar[i]["seconds"] / regen_speedup
        if dr[i]["pass"] or not ar[i]["pass"]:
            total, passed = total + keep, passed + dr[i]["pass"]
        else:
            total, passed = total + keep + redo, passed + 1
            savings.append(redo)
    for save in sorted(savings, reverse=True):
        if (passed - 1) / n < floor - 1e-12:
            break
        total, passed = total - save, passed - 1
    return passed / n, t_ar / total


def print_perfect_judge_bound(by: dict[str, list[dict]], common: set[int]) -> None:
    rows = [(g, perfect_judge_bound(by, common, g)) for g in (1.5, 2.0, 3.0, float("inf"))]
    if all(b is None for _, b in rows):
        return
    print("\n| perfect judge, target rewrites at | pass@1 (within 2 points of AR) | speedup vs AR |")
    print("|---|---|---|")
    for g, b in rows:
        if b is not None:
            print(f"| {'no cost' if g == float('inf') else f'{g:.1f}x AR'} | {100 * b[0]:.1f}% | {b[1]:.2f}x |")
