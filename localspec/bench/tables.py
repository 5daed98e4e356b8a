"""`localspec bench tables`: the papers' tables, measured on local models.

Table 1 of SpecTr-GBV (Lin et al.) is "datasets x methods -> block efficiency and
speedup"; reviewers compare against that shape, so this bench reproduces it (code =
HumanEval 0-99, math, chat, plain text) for sd, spectr, gbv, spectr-gbv and mdbv, plus
ablations over K, L and T, plus llama.cpp's own speculative loop as a peer column.

Fairness rules, same as `bench speed`: one process, one loaded model pair; on every prompt
all configurations run back to back (AR first, then each method, then the peer), so
machine drift hits every column alike; a speedup is the median over prompts of
(tok/s of the method / tok/s of AR on the same prompt at the same temperature). Block
efficiency is pooled (sum of tokens / sum of target calls), the papers' definition.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from localspec.bench.common import (
    Prompt,
    add_placement_args,
    machine_info,
    median,
    read_jsonl,
    write_json,
)
from localspec.bench.common import session_options as bench_options
from localspec.bench.runner import PEER, Job, Run, Runner, Spec, peer_paths, spec
from localspec.errors import ConfigError

DATASETS = ("code", "math", "chat", "text")
METHODS = ("sd", "spectr", "gbv", "spectr-gbv", "mdbv")  # the papers' column order; every verifier (tests)
ABLATIONS = ("K", "L", "T")
HUMANEVAL_MAX = 100  # problems 100-163 are reserved; humaneval.problems() refuses them too


# --------------------------------------------------------------------------- datasets


def load_dataset(name: str, limit: int | None = None) -> list[Prompt]:
    """Prompts of one dataset. code = HumanEval 0..min(limit, 100)-1 as a chat instruction
    (the reserved problems 100-163 can never be reached); the others ship with localspec;
    `text` is raw completion because plain-text continuation is a different regime
    (no chat template, long fluent continuations the draft predicts well)."""
    if name == "code":
        from localspec.bench import humaneval as he

        n = HUMANEVAL_MAX if limit is None else min(limit, HUMANEVAL_MAX)
        return [Prompt("code", p.task_id, he.INSTRUCTION.format(prompt=p.prompt)) for p in he.problems(list(range(n)))]
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}")
    rows = read_jsonl(name)
    return [Prompt(name, r["id"], r["prompt"], chat=name != "text") for r in rows[:limit]]


# --------------------------------------------------------------------------- plan


@dataclass
class Plan:
    """What to measure: Table 1 columns, and per ablation the (value, spec) points."""

    main: list[Spec]
    ablations: dict[str, list[tuple[float, Spec]]]
    ablation_datasets: list[str]
    ablation_limit: int
    peer: Spec | None

    def specs_for(self, dataset: str, index: int) -> list[Spec]:
        """Ordered, de-duplicated configurations for the index-th prompt of a dataset:
        grouped by temperature (the main T first), AR opening each group."""
        todo = list(self.main)
        if dataset in self.ablation_datasets and index < self.ablation_limit:
            todo += [s for pts in self.ablations.values() for _, s in pts]
        temps = list(dict.fromkeys(s.T for s in todo))
        out: list[Spec] = []
        for t in temps:
            group = [spec("ar", T=t)] + [s for s in todo if s.T == t]
            out += [s for s in dict.fromkeys(group) if s not in out]
        return out


def make_plan(a: argparse.Namespace) -> Plan:
    """Plan from the parsed flags (see add_args for their meaning)."""
    main = [spec(m, a.K, a.L, a.temp) for m in a.methods]
    ab: dict[str, list[tuple[float, Spec]]] = {}
    for name in a.ablations:
        if name == "K":
            ab["K"] = [(k, spec(m, k, a.L, a.temp)) for m in a.ablation_methods for k in a.K_grid]
        elif name == "L":
            ab["L"] = [(n, spec(m, a.K, n, a.temp)) for m in a.ablation_methods for n in a.L_grid]
        elif name == "T":
            ab["T"] = [(t, spec(m, a.K, a.L, t)) for m in a.ablation_methods for t in a.T_grid]
    peer_spec = Spec(PEER, 1, a.peer_draft_max, float(a.temp)) if a.peer else None
    return Plan(main, ab, list(a.ablation_datasets or a.datasets), a.ablation_limit, peer_spec)


# --------------------------------------------------------------------------- summaries


Index = dict[tuple[str, str, Spec], Run]


def index_runs(runs: list[Run]) -> Index:
    return {(r.dataset, r.prompt_id, r.spec): r for r in runs}


def cell(idx: Index, keys: list[tuple[str, str]], s: Spec, peer: Spec | None = None) -> dict | None:
    """One table cell over the prompts `keys` [(dataset, prompt id)], None if never run.

    speedup: median of per-prompt tok/s ratios to AR at the same T (same run, interleaved);
    block_efficiency: pooled tokens / target calls; vs_peer: median of per-prompt ratios
    to the peer's tok/s when the peer ran on those prompts.
    """
    rs = [idx[(d, p, s)] for d, p in keys if (d, p, s) in idx]
    if not rs:
        return None
    ar = spec("ar", T=s.T)

    def ratios(other: Spec | None) -> list[float]:
        if other is None:
            return []
        base = [(r, idx.get((r.dataset, r.prompt_id, other))) for r in rs]
        return [r.tok_per_s / b.tok_per_s for r, b in base if b is not None and b.tok_per_s > 0]

    sp, vp = ratios(ar), ratios(peer if peer != s else None)
    calls = sum(r.target_calls for r in rs)
    acc = [r.extra["acceptance"] for r in rs if "acceptance" in r.extra]
    return {
        "n": len(rs),
        "tok_per_s": median([r.tok_per_s for r in rs]),
        "speedup": median(sp) if sp else None,
        "block_efficiency": sum(r.n_tokens for r in rs) / calls if calls else None,
        "vs_peer": median(vp) if vp else None,
        "acceptance": median(acc) if acc else None,
    }


def _avg(cells: list[dict | None], key: str) -> float | None:
    xs = [c[key] for c in cells if c and c.get(key) is not None]
    return sum(xs) / len(xs) if xs else None


def summarize_table1(runs: list[Run], plan: Plan, datasets: list[str]) -> dict:
    """{label: {dataset | "avg": cell}}; "avg" is the mean of the per-dataset values (as the
    papers' Avg. column), so a 100-prompt dataset does not drown the 8-prompt ones."""
    idx = index_runs(runs)
    specs = [spec("ar", T=plan.main[0].T if plan.main else 0.0), *plan.main]
    specs += [plan.peer] if plan.peer else []
    out: dict[str, dict] = {}
    for s in specs:
        row: dict[str, dict | None] = {}
        for d in datasets:
            keys = sorted({(r.dataset, r.prompt_id) for r in runs if r.dataset == d})
            row[d] = cell(idx, keys, s, plan.peer)
        if not any(row.values()):
            continue
        cells = list(row.values())
        row["avg"] = {k: _avg(cells, k) for k in ("tok_per_s", "speedup", "block_efficiency", "vs_peer", "acceptance")}
        out[s.label] = row
    return out


def summarize_ablation(runs: list[Run], plan: Plan, name: str) -> list[dict]:
    """Rows {method, value, spec, cell...} for one ablation, pooled over the ablation
    prompts of every ablation dataset (the same prompt set at every point)."""
    idx = index_runs(runs)
    allowed = set(plan.ablation_datasets)
    keys = sorted({(r.dataset, r.prompt_id) for r in runs if r.dataset in allowed and r.extra.get("ablation")})
    rows = []
    for value, s in plan.ablations.get(name, []):
        c = cell(idx, keys, s)
        if c is not None:
            rows.append({"method": s.method, "value": value, "label": s.label, **c})
    return rows


def greedy_check(runs: list[Run]) -> dict[str, bool]:
    """At T = 0 every lossless method must reproduce AR's text exactly (the cheapest
    end-to-end losslessness check there is); {dataset:prompt: identical?}."""
    out: dict[str, bool] = {}
    by: dict[str, dict[str, str]] = {}
    for r in runs:
        if r.T == 0 and r.method not in (PEER, "spectr-gbv"):
            by.setdefault(f"{r.dataset}:{r.prompt_id}", {})[r.spec.label] = r.text
    for k, texts in by.items():
        if len(texts) > 1:
            out[k] = len(set(texts.values())) == 1
    return out


# --------------------------------------------------------------------------- running


def warmup(runner: Runner, p: Prompt, a: argparse.Namespace) -> None:
    """Untimed short runs before measuring: the first generation in a process pays for
    page-ins of the mmapped weights and compute-buffer allocation (measured: +0.4 s on the
    first speculative run of SmolLM2), which would otherwise land on one column only."""
    K = max([a.K, *a.K_grid]) if "K" in a.ablations else a.K
    L = max([a.L, *a.L_grid]) if "L" in a.ablations else a.L
    short = Runner(runner.sess, argparse.Namespace(n_predict=8, draft_temp=a.draft_temp))
    for s in (spec("ar", T=a.temp), spec("mdbv", K, L, a.temp)):
        short.local(p, s, seed=0)


def _peer_info(enabled: bool) -> dict:
    from localspec.bench import peer

    bins = peer.peer_binaries()
    if not enabled or bins is None:
        return {"llama_cpp_peer": None}
    try:
        ver = peer.peer_version(bins[peer.SPEC_BIN])
    except peer.PeerRunError:
        ver = "unknown"
    return {"llama_cpp_peer": ver, "peer_dir": str(bins[peer.SPEC_BIN].parent)}


def apply_quick(a: argparse.Namespace) -> None:
    """--quick: a smoke run of every table on any pair in a few minutes: one prompt per
    dataset, 24 tokens, two points per ablation on the first dataset only."""
    a.n_predict = min(a.n_predict, 24)
    a.limit = a.limit or 1
    a.ablation_limit = 1
    a.ablation_datasets = a.ablation_datasets or a.datasets[:1]
    a.K_grid = [1, a.K]
    a.L_grid = [2, a.L + 2]
    a.T_grid = [0.0, a.temp]


def main(a: argparse.Namespace) -> int:
    from localspec.loading import open_session
    from localspec.models import default_pair

    if a.quick:
        apply_quick(a)
    target, draft = a.target, a.draft
    if target is None:
        target, draft0 = default_pair()
        draft = draft or draft0
    prompts = {d: load_dataset(d, a.limit) for d in a.datasets}
    plan = make_plan(a)
    models = peer_paths(plan.peer is not None, target, draft)
    if models is None:
        plan.peer = None
    jobs = [
        Job(p, plan.specs_for(d, i), a.seed + i, plan.peer,
            {"ablation": d in plan.ablation_datasets and i < plan.ablation_limit})
        for d, ps in prompts.items() for i, p in enumerate(ps)
    ]  # fmt: skip
    total = sum(len(j.specs) + (j.peer is not None) for j in jobs)
    print(f"bench tables: {target} <- {draft}; {sum(map(len, prompts.values()))} prompts, {total} runs", file=sys.stderr)
    sess = open_session(target, draft, bench_options(a))
    runner = Runner(sess, a, models)
    try:
        if a.warmup and jobs:
            warmup(runner, jobs[0].prompt, a)
        runs, interrupted = runner.run_all(jobs, "bench tables")
    finally:
        sess.close()
    if not any(r.method == PEER for r in runs):
        plan.peer = None
    write_results(a, plan, runs, target, draft, interrupted)
    return 130 if interrupted else 0


def write_results(a: argparse.Namespace, plan: Plan, runs: list[Run], target: str, draft: str,
                  interrupted: bool = False) -> dict:
    """tables.md + tables.json + PNGs in --out-dir, the markdown on stdout; returns the JSON
    payload. Every file carries the machine and the exact command, so a number read out of
    context still says where and how it was measured."""
    from localspec.bench import plots

    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    machine = {**machine_info(a.threads), **_peer_info(plan.peer is not None)}
    datasets = [d for d in a.datasets if any(r.dataset == d for r in runs)]
    t1 = summarize_table1(runs, plan, datasets)
    abl = {n: summarize_ablation(runs, plan, n) for n in plan.ablations}
    greedy = greedy_check(runs)
    meta = {
        "target": target, "draft": draft, "K": a.K, "L": a.L, "T": a.temp, "n_predict": a.n_predict,
        "threads": a.threads, "interrupted": interrupted,
        "prompts": {d: len({r.prompt_id for r in runs if r.dataset == d}) for d in datasets},
        "ablation_datasets": plan.ablation_datasets, "ablation_limit": plan.ablation_limit,
    }  # fmt: skip
    title = f"{target} <- {draft}; K={a.K} L={a.L} T={a.temp:g}; n={a.n_predict}"
    pngs = plots.write_all(out, t1, datasets, abl, title)
    text = plots.report_markdown(meta, machine, t1, datasets, abl, greedy, pngs)
    (out / "tables.md").write_text(text, encoding="utf-8")
    payload = {
        "machine": machine, "command": machine["command"], **meta,
        "settings": {k: v for k, v in vars(a).items() if k != "func"},
        "table1": t1, "ablations": abl, "greedy_identical": greedy,
        "plots": {k: v.name for k, v in pngs.items()}, "runs": [r.to_json() for r in runs],
    }  # fmt: skip
    write_json(out / "tables.json", payload)
    print(text)
    print(f"wrote {out}/tables.md, tables.json and {len(pngs)} PNG(s)", file=sys.stderr)
    return payload


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--target", default=None, help="target (registry name or path; default pair if omitted)")
    p.add_argument("-md", "--draft", default=None, help="draft (registry name or path)")
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument("--limit", type=int, default=None, help="first N prompts per dataset (code: HumanEval 0..N-1, at most 100)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS, help="Table 1 methods (AR is always run)")
    p.add_argument("-K", type=int, default=3, help="drafts for multi-draft methods (sd/gbv use 1)")
    p.add_argument("-L", type=int, default=4, help="draft length")
    p.add_argument("--temp", type=float, default=0.4, help="target (and draft) temperature")
    p.add_argument("--draft-temp", type=float, default=None, help="draft temperature if different")
    p.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=128)
    p.add_argument("--ablations", nargs="*", default=list(ABLATIONS), choices=ABLATIONS, help="sweeps to run (none: no flag values)")
    p.add_argument("--ablation-methods", nargs="+", default=["mdbv", "sd"], choices=METHODS)
    p.add_argument("--ablation-datasets", nargs="+", default=None, choices=DATASETS, help="default: all --datasets")
    p.add_argument("--ablation-limit", type=int, default=4, help="ablations run on the first N prompts of each dataset")
    p.add_argument("--K-grid", dest="K_grid", nargs="+", type=int, default=[1, 2, 3, 4])
    p.add_argument("--L-grid", dest="L_grid", nargs="+", type=int, default=[2, 4, 6, 8, 10])
    p.add_argument("--T-grid", dest="T_grid", nargs="+", type=float, default=[0.0, 0.4, 0.7, 1.0])
    p.add_argument("--threads", "-t", type=int, default=2)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0, help="prompt i of a dataset uses seed+i for every method")
    p.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                   help="add llama.cpp's llama-speculative-simple when built")
    p.add_argument("--peer-draft-max", type=int, default=16, help="peer --spec-draft-n-max (its default 16)")
    p.add_argument("--peer-p-min", type=float, default=0.75, help="peer --spec-draft-p-min (its default 0.75)")
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                   help="untimed AR + mdbv runs of 8 tokens before measuring")
    p.add_argument("--quick", action="store_true", help="smoke run of every table in a few minutes")
    p.add_argument("--out-dir", default="bench/results/latest", help="where tables.md/.json and PNGs go")
    add_placement_args(p)
