"""`localspec bench speed`: AR vs speculative methods vs llama.cpp's own speculative loop.

Every configuration runs on every prompt, interleaved (AR, m1, m2, ..., peer, then the next
prompt, which runs them back to front: `--order`), in one process, so machine drift hits all
columns alike and no column always holds the first or the last place; figures are medians over
prompts and speedups are medians of per-prompt ratios to the AR run of the same prompt.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import replace

from localspec.bench.common import (
    HALVES,
    Prompt,
    add_placement_args,
    load_prompts,
    machine_info,
    median,
    write_json,
)
from localspec.bench.common import session_options as bench_options
from localspec.bench.peer_best import best_peer as pick_peer
from localspec.bench.runner import PEER, Job, Run, Runner, Spec, peer_paths, spec


def parse_grid(methods: list[str], grid: list[str], T: float = 0.0) -> list[Spec]:
    """Methods x "K:L" grid -> columns at temperature T (AR first; K is 1 for single-draft
    methods; `auto` alone chooses K and L itself).

    "dyn" is `auto` held to the grid's K with L as the cap of its dynamic length (the cost
    model still picks the verifier, stops each draft where one more token stops paying, and
    may fall back to AR): how K drafts with a dynamic length compare with fixed blocks.
    """
    out = [spec("ar", T=T)]
    for token in methods:
        m, _, via = token.partition("+")  # "sd+ngram": sd with --spec-type ngram
        if m == "ar":
            continue
        if m in ("auto", "auto-hint", "auto-cold", "auto-pred", "auto-myopic"):  # auto-hint: --draft-hint;
            # auto-cold: no shipped priors; auto-pred: the prompt's quoted text as its `prediction`;
            # auto-myopic: the draft length decided on the next token alone (GenConfig.draft_lookahead 1)
            out.append(Spec("auto", 1, 8, T, free=True, proposers=via, hint=m == "auto-hint", cold=m == "auto-cold",
                            predict=m == "auto-pred", myopic=m == "auto-myopic"))
            continue
        for g in grid:
            K, L = (int(v) for v in g.split(":"))
            s = Spec("auto", K, L, T) if m == "dyn" else spec(m, K, L, T)
            s = replace(s, proposers=via)
            if s.label not in [c.label for c in out]:
                out.append(s)
    return out


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def table(results: list[Run], labels: list[str], prompts: list[str], peer_label: str = "") -> tuple[str, dict]:
    """Markdown table: medians over prompts, speedups as medians of per-prompt ratios
    (`peer_label`: the llama.cpp column the "vs llama.cpp spec" ratios are taken to)."""
    by = {(r.label, r.prompt_id): r for r in results}
    rows = [
        "| config | tok/s (median) | speedup vs AR | vs llama.cpp spec | block eff. | mean τ | draft / verify / overhead s | overhead ms/iter |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for lab in labels:
        rs = [by[(lab, p)] for p in prompts if (lab, p) in by]
        if not rs:
            continue
        sp = [r.tok_per_s / by[("ar", r.prompt_id)].tok_per_s for r in rs if ("ar", r.prompt_id) in by]
        vp = [r.tok_per_s / by[(peer_label, r.prompt_id)].tok_per_s for r in rs if (peer_label, r.prompt_id) in by]
        be = [r.block_efficiency for r in rs if r.block_efficiency is not None]
        its = sum(r.iterations for r in rs)
        s = {
            "tok_per_s": median([r.tok_per_s for r in rs]),
            "speedup_vs_ar": median(sp),
            "vs_peer": median(vp) if vp else None,
            "block_efficiency": median(be) if be else None,  # None: not reported (the peer)
            # AR drafts nothing: no tau to show (its block efficiency is exactly 1)
            "mean_tau": median([r.mean_accepted for r in rs]) if its and lab != "ar" else None,
            "draft_s": sum(r.draft_s for r in rs),
            "verify_s": sum(r.verify_s for r in rs),
            "overhead_s": sum(r.overhead_s for r in rs),
            "overhead_ms_per_iter": 1e3 * sum(r.overhead_s for r in rs) / its if its else 0.0,
        }
        summary[lab] = s
        peer_col = "" if s["vs_peer"] is None else f"{s['vs_peer']:.2f}x"
        rows.append(
            f"| {lab} | {s['tok_per_s']:.1f} | {s['speedup_vs_ar']:.2f}x | {peer_col} | "
            f"{_num(s['block_efficiency'])} | {_num(s['mean_tau'])} | "
            f"{s['draft_s']:.1f} / {s['verify_s']:.1f} / {s['overhead_s']:.2f} | {s['overhead_ms_per_iter']:.2f} |"
        )
    return "\n".join(rows), summary


def multi_vs_single(results: list[Run], configs: list[Spec]) -> tuple[str, dict]:
    """Each K >= 2 column against `sd` with the same L (a `dyn` column against `dyn` K=1 with
    the same cap), pooled over prompts.

    tok/s = tokens per target call (block efficiency) / seconds per iteration, so the speed
    ratio splits exactly into a block-efficiency ratio and an iteration-cost ratio. K drafts
    never cost less per iteration than one (the draft batch and the verified trie contain the
    single draft's), so the block-efficiency ratio is the most K drafts could gain over `sd`
    at that L even if drafting and verifying them were free: the ceiling that says whether a
    multi-draft goal is reachable on this machine at all.
    """
    def pooled(label: str) -> tuple[float, float] | None:
        rs = [r for r in results if r.label == label and r.iterations > 0 and r.tok_per_s > 0]
        its = sum(r.iterations for r in rs)
        if not its:
            return None
        toks = sum(r.n_tokens for r in rs)
        secs = sum(r.n_tokens / r.tok_per_s for r in rs)
        return toks / its, secs / its

    rows = ["| config | vs | block-eff. ratio (ceiling) | iteration-cost ratio | tok/s ratio |",
            "|---|---|---|---|---|"]
    out: dict = {}
    for c in configs:
        if c.K < 2 or c.method == "ar" or (c.method == "auto" and c.free):
            continue
        base = Spec("auto", 1, c.L).label if c.method == "auto" else spec("sd", 1, c.L).label
        m, b = pooled(c.label), pooled(base)
        if m is None or b is None:
            continue
        be, cost = m[0] / b[0], b[1] / m[1]
        out[c.label] = {"vs": base, "be_ratio": be, "cost_ratio": cost, "speed_ratio": be * cost}
        rows.append(f"| {c.label} | {base} | {be:.3f} | {cost:.3f} | {be * cost:.3f} |")
    return ("\n".join(rows) if out else ""), out


def _median_known(xs: list[float]) -> float:
    """The median of the values that are numbers (NaN: a run that did not record one)."""
    known = [x for x in xs if not math.isnan(x)]
    return median(known) if known else math.nan


def predicted_vs_measured(results: list[Run]) -> tuple[str, dict]:
    """For each `auto` column: the speedup over AR its cost model predicted (at its first
    decision, before it saw the prompt, and at its last, after its acceptance estimate had
    learned from it) and the one it forecast for the iterations it ran (each priced before
    the target verified it: costmodel/forecast.py), beside the speedup measured against the
    AR run of the same prompt; medians over prompts. The last prediction and the forecast
    are split into tokens per target pass and seconds per pass, each beside its measured
    value, so a miss says whether acceptance or cost was mispredicted. This is how a bench
    checks the cost model."""
    ar = {r.prompt_id: r.tok_per_s for r in results if r.label == "ar" and r.tok_per_s > 0}
    cols: dict[str, list[tuple[float, ...]]] = {}
    for r in results:
        pred = r.extra.get("predicted") or []  # (speedup, tokens per pass, seconds per pass) per decision
        if r.method != "auto" or not pred or r.prompt_id not in ar:
            continue
        (first, *_), (last, e, sec) = pred[0], pred[-1]
        calls = r.target_calls or 1
        measured = r.tok_per_s / ar[r.prompt_id]
        fc = r.extra.get("forecast")  # [tokens, seconds, AR step]; None in runs before stop 53
        tokens, seconds, step = fc if fc else (math.nan, math.nan, math.nan)
        cols.setdefault(r.label, []).append(
            (first, last, measured, e, r.n_tokens / calls, sec, r.seconds / calls,
             tokens / seconds * step, tokens / calls, seconds / calls))
    rows = ["| config | predicted at start | predicted at end | forecast per iteration | measured "
            "| measured / predicted (end) | measured / forecast "
            "| tokens per pass, predicted / forecast / measured | ms per pass, predicted / forecast / measured |",
            "|---|---|---|---|---|---|---|---|---|"]
    out: dict = {}
    for lab, v in cols.items():
        m = [_median_known([x[i] for x in v]) for i in range(10)]
        out[lab] = {"predicted_first": m[0], "predicted_last": m[1], "forecast": m[7], "measured": m[2],
                    "ratio": median([x[2] / x[1] for x in v]),
                    "forecast_ratio": _median_known([x[2] / x[7] for x in v]),
                    "tokens_per_pass": [m[3], m[4]], "seconds_per_pass": [m[5], m[6]],
                    "forecast_per_pass": [m[8], m[9]]}
        rows.append(f"| {lab} | {m[0]:.2f}x | {m[1]:.2f}x | {m[7]:.2f}x | {m[2]:.2f}x | {out[lab]['ratio']:.2f} "
                    f"| {out[lab]['forecast_ratio']:.2f} | {m[3]:.2f} / {m[8]:.2f} / {m[4]:.2f} "
                    f"| {1e3 * m[5]:.0f} / {1e3 * m[9]:.0f} / {1e3 * m[6]:.0f} |")
    return ("\n".join(rows) if out else ""), out


def pooled_proposers(rs: list[Run]) -> dict[str, dict]:
    """{drafter: {drafted, accepted, acceptance}} summed over runs (`run --json`'s
    "proposers" shape); the peer's one draft counts as "draft". Drafters that drafted
    nothing are left out."""
    tot: dict[str, list[int]] = {}
    for r in rs:
        per = r.extra.get("proposers")
        if per is None and "drafted" in r.extra:  # the peer: llama.cpp's accepted / drafted
            per = {"draft": {"drafted": r.extra["drafted"], "accepted": r.extra["accepted"]}}
        for name, v in (per or {}).items():
            d, a = (v["drafted"], v["accepted"]) if isinstance(v, dict) else v
            t = tot.setdefault(name, [0, 0])
            t[0] += d
            t[1] += a
    return {k: {"drafted": d, "accepted": a, "acceptance": a / d} for k, (d, a) in tot.items() if d}


def constrained(results: list[Run], labels: list[str]) -> tuple[str, dict]:
    """For runs under a constraint (the structured set): per column, the share of its tokens
    the grammar forced (pooled: Σ forced / Σ tokens; "—" for the peer, which does not say)
    and each drafter's acceptance, pooled over prompts. Empty when nothing was constrained."""
    rows = ["| config | prompts | forced share | acceptance per drafter (accepted / drafted) |",
            "|---|---|---|---|"]
    out: dict = {}
    for lab in labels:
        rs = [r for r in results if r.label == lab and r.extra.get("constraint")]
        if not rs:
            continue
        toks = sum(r.n_tokens for r in rs)
        share = None if rs[0].method == PEER else (sum(r.extra.get("forced", 0) for r in rs) / toks if toks else 0.0)
        per = pooled_proposers(rs)
        out[lab] = {"prompts": len(rs), "tokens": toks, "forced_share": share, "proposers": per}
        acc = ", ".join(f"{k} {v['acceptance']:.2f} ({v['accepted']}/{v['drafted']})" for k, v in per.items()) or "—"
        rows.append(f"| {lab} | {len(rs)} | {_num(share)} | {acc} |")
    return ("\n".join(rows) if out else ""), out


def greedy_identical(results: list[Run]) -> dict[str, bool]:
    """{prompt id: every localspec column wrote the same text} (the last repeat's texts)."""
    texts: dict[str, dict[str, str]] = {}
    for r in results:
        if r.method != PEER:
            texts.setdefault(r.prompt_id.rpartition("#")[0], {})[r.label] = r.text
    return {pid: len(set(v.values())) == 1 for pid, v in texts.items()}


def make_jobs(prompts: list[Prompt], configs: list[Spec], peer_specs: list[Spec], repeats: int,
              order: str = "alternate") -> list[Job]:
    """One job per prompt and repeat; with order "alternate" every other one runs back to
    front, and a prompt's repeats alternate too, so with `--repeats 2` each prompt runs once
    each way (what `order_effect` compares)."""
    return [
        Job(replace(p, id=f"{p.id}#{rep}"), configs, 1000 * rep + pi, peer_specs[0], more_peers=peer_specs[1:],
            reverse=order == "alternate" and (pi + rep) % 2 == 1)
        for rep in range(repeats) for pi, p in enumerate(prompts)
    ]  # fmt: skip


def order_effect(results: list[Run]) -> dict[str, float]:
    """Per column, the median over prompts that ran both ways (`--order alternate
    --repeats 2`) of its tok/s with the order reversed over its tok/s in the forward order:
    how much a column's position, not its method, moved its speed."""
    both: dict[str, dict[str, dict[bool, list[float]]]] = {}
    for r in results:
        if r.tok_per_s > 0 and "reversed" in r.extra:
            by = both.setdefault(r.label, {}).setdefault(r.prompt_id.rpartition("#")[0], {False: [], True: []})
            by[r.extra["reversed"]].append(r.tok_per_s)
    return {lab: median([statistics.mean(v[True]) / statistics.mean(v[False]) for v in ps.values() if v[True] and v[False]])
            for lab, ps in both.items() if any(v[True] and v[False] for v in ps.values())}  # fmt: skip


def main(a: argparse.Namespace) -> int:
    from localspec.errors import ConfigError
    from localspec.loading import open_session
    from localspec.models import default_pair

    target, draft = a.target, a.draft
    if target is None:
        target, draft0 = default_pair()
        draft = draft or draft0
    prompts = load_prompts(a.prompts, a.kinds, 3 if a.quick and not a.limit else a.limit, a.half)
    if not prompts:
        picked = [f"--kinds {' '.join(a.kinds)}" if a.kinds else "", f"--half {a.half}" if a.half else ""]
        raise ConfigError(f"no prompts match {' '.join(x for x in picked if x) or 'the prompt file'}")
    for p in prompts:  # a schema llguidance refuses: one line before any model loads
        if p.constraint is not None:
            p.constraint.grammar()
    if a.quick:
        a.n_predict = min(a.n_predict, 64)
    configs = parse_grid(a.methods, a.grid, a.temp)
    if any(c.cold for c in configs) and not a.first_turn:
        raise ConfigError("auto-cold is auto's first turn without the shipped priors: add --first-turn "
                          "(later turns learn the same way with or without them)")
    peer_specs = [Spec(PEER, 1, a.peer_draft_max, a.temp, proposers=t) for t in a.peer_spec_types]
    if a.peer_best is not None and a.peer_best not in a.peer_spec_types:  # before an hour of runs
        raise ConfigError(f"--peer-best {a.peer_best}: not in --peer-spec-types ({' '.join(a.peer_spec_types)})")
    models = peer_paths(a.peer, target, draft)
    sess = open_session(target, draft, bench_options(a))
    jobs = make_jobs(prompts, configs, peer_specs, a.repeats, a.order)
    try:
        results, interrupted = Runner(sess, a, models).run_all(jobs, "bench speed")
    finally:
        sess.close()
    ran_peers = [s.label for s in peer_specs if any(r.label == s.label for r in results)]
    labels = [c.label for c in configs] + ran_peers
    # the llama.cpp column the ratios are taken to (bench/peer_best.py: a column that drafted
    # nothing is the plain loop; --peer-best names one chosen on the tuning half)
    best_peer, peer_notes = pick_peer(results, peer_specs, a.peer_best)
    md, summary = table(results, labels, [j.prompt.id for j in jobs], best_peer)
    greedy_same = greedy_identical(results) if a.temp == 0 else None
    head = (
        f"target {target} <- draft {draft}; {len(prompts)} prompts x {a.repeats}; n={a.n_predict}; "
        f"T={a.temp}; threads={a.threads or 'auto'}" + (" — INTERRUPTED, partial results" if interrupted else "")
    )
    print(head)
    print(md)
    for line in peer_notes:
        print(line)
    if greedy_same is not None:
        print(f"greedy outputs identical across localspec methods: {sum(greedy_same.values())}/{len(greedy_same)} prompts")
    multi_md, multi = multi_vs_single(results, configs)
    if multi_md:
        print("\nK drafts vs one (sd) at the same L, pooled over prompts; the block-efficiency "
              "ratio is the most K drafts could gain if they cost nothing extra:")
        print(multi_md)
    order = order_effect(results)
    if order:
        print("\neach column's tok/s with the order reversed over forward (median over prompts run both ways; "
              "1.00 = its position did not move it): " + ", ".join(f"{k} {v:.3f}" for k, v in order.items()))
    pred_md, pred = predicted_vs_measured(results)
    if pred_md:
        print("\nthe cost model's predicted speedup over AR vs the measured one (medians over prompts):")
        print(pred_md)
    con_md, con = constrained(results, labels)
    if con_md:
        print("\nunder each prompt's JSON schema (every column, AR and llama.cpp included): the tokens the "
              "grammar forced and each drafter's acceptance, pooled over prompts:")
        print(con_md)
    for lab, c in con.items():
        summary[lab].update(forced_share=c["forced_share"], proposers=c["proposers"])
    payload = {
        "machine": machine_info(a.threads),
        "target": target,
        "draft": draft,
        "settings": {k: v for k, v in vars(a).items() if k != "func"},
        "summary": summary,
        "runs": [r.to_json() for r in results],
        "greedy_identical": greedy_same,
        "table_markdown": md,
        "peer_column": {"label": best_peer, "why": peer_notes},
        "multi_vs_single": multi,
        "predicted_vs_measured": pred,
        "constrained": con,
        "order_effect": order,
        "interrupted": interrupted,
    }
    if a.out:
        write_json(a.out, payload)
        print(f"wrote {a.out}", file=sys.stderr)
    if a.json:
        print(json.dumps(payload["summary"]))
    return 130 if interrupted else 0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--target", default=None, help="target (registry name or path; default pair if omitted)")
    p.add_argument("-md", "--draft", default=None, help="draft (registry name or path)")
    p.add_argument("--methods", nargs="+", default=["auto", "sd", "mdbv"],
                   help="methods to compare with AR: auto, sd, gbv, spectr, spectr-gbv, mdbv, and dyn "
                        "(auto held to each grid K, L the cap of its dynamic length); auto-hint is auto "
                        "with --draft-hint, auto-cold auto without the shipped priors, auto-pred auto given the prompt's quoted "
                        "text (after its first blank line) as OpenAI's `prediction`, auto-myopic auto whose draft length looks at the "
                        "next token only; METHOD+SPEC-TYPE names who drafts (sd+ngram, auto+ngram,draft)")
    p.add_argument("--grid", nargs="+", default=["1:8", "3:6"], help="K:L settings for explicit methods")
    p.add_argument("--prompts", default=None, help="JSONL prompts file (default: shipped code/chat/math set)")
    p.add_argument("--kinds", nargs="*", default=None,
                   help="prompt kinds to keep (code, chat, math, edit; structured: the JSON-schema set, "
                        "each prompt decoded under its schema by every column; long-edit, with --half: the edit "
                        "requests on 1,600-2,600-token files)")
    p.add_argument("--half", choices=HALVES, default=None,
                   help="the split sets (edit, code, chat, structured; docs/bench.md#split-sets), this half "
                        "only: tune policy on 'tune', report figures on 'report'")
    p.add_argument("--limit", type=int, default=None, help="first N prompts only")
    p.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=200)
    p.add_argument("--temp", type=float, default=0.0)
    p.add_argument("--draft-temp", type=float, default=None)
    p.add_argument("--threads", "-t", type=int, default=2)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=1,
                   help="run each prompt N times (with --order alternate, a prompt's repeats alternate its order too)")
    p.add_argument("--order", choices=("alternate", "fixed"), default="alternate",
                   help="the columns' order within a prompt: alternate (default) runs AR, the methods, then llama.cpp "
                        "on one prompt and the reverse on the next, so no column always runs first or last (a "
                        "column's position moves its speed: docs/bench.md#order); fixed: always AR first")
    p.add_argument("--first-turn", action="store_true",
                   help="measure each prompt as a fresh process's first turn: what auto learned on earlier "
                        "prompts is forgotten before each (compare auto, from the shipped priors, with auto-cold)")
    p.add_argument("--auto-free", action=argparse.BooleanOptionalAction, default=True,
                   help="let auto choose K and L (default) instead of the grid's")
    p.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                   help="include llama.cpp's llama-speculative-simple when built")
    p.add_argument("--peer-draft-max", type=int, default=16, help="peer --spec-draft-n-max (its default 16)")
    p.add_argument("--peer-spec-types", nargs="+", default=["draft-simple"], metavar="TYPE[,TYPE]",
                   help="llama.cpp --spec-type settings to run side by side (e.g. draft-simple ngram-simple "
                   "ngram-map-k ngram-mod draft-simple,ngram-mod; none: its plain loop, no drafts); ratios are "
                   "taken to the fastest (a setting that drafted nothing counts as `none` when it ran)")
    p.add_argument("--peer-best", default=None, metavar="TYPE",
                   help="take the llama.cpp ratios to this --spec-type's column, chosen on the tuning half "
                        "(a report half's own fastest of several plain-loop-like columns is its noise)")
    p.add_argument("--peer-p-min", type=float, default=0.75, help="peer --spec-draft-p-min (its default 0.75)")
    p.add_argument("--quick", action="store_true", help="3 prompts x 64 tokens smoke run")
    p.add_argument("--out", default=None, help="write JSON results here")
    p.add_argument("--json", action="store_true", help="print the summary as JSON last")
    add_placement_args(p)
