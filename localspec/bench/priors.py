"""`localspec bench priors`: fit the acceptance priors a fresh session starts from, on a tuning half.

The target's greedy answers to the split sets' tuning half (never the report half) are
replayed: a lookup drafting wherever the history has a match gives, per matched n-gram length
and where the match's continuation was (the prompt or the answer so far),
the tokens accepted and positions reached (costmodel/priors.replay_lookups: at T = 0 a
drafted token is accepted iff it is the answer's); with -md, the greedy draft model's
agreement with the answers, read off one teacher-forced decode, is the pair's acceptance.
`--out` merges them into a priors file (the shipped one is localspec/data/priors.json:
docs/performance.md#priors); the pair's entry is keyed by the two GGUF file names.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Container
from pathlib import Path

from localspec import tools
from localspec.bench.ceiling import greedy_answers
from localspec.bench.common import HALVES, machine_info, median
from localspec.bench.fim_answers import fim_answers
from localspec.config import GenConfig
from localspec.costmodel import priors
from localspec.costmodel.lookup import LOOKUP_MAX_L, gate_key

FIM_KIND = "fim"  # the editor's completion requests (bench/fim_answers.py), not a prompt set
FIM_N_PREDICT = 64  # bench fim's answer length


def lookup_counts(answers: list[tuple[str, list[int], list[int]]], n_min: int, n_max: int,
                  fim: tuple[int, int] = (-1, -1), barrier: Container[int] = frozenset()) -> dict[str, list[float]]:
    """Pooled {"ngram:n:origin": [accepted, reached]} over the answers (a fresh index per
    answer; `fim`: the target's FIM suffix and middle ids, which mark a FIM prompt's regions;
    `barrier`: the tokens the session's lookups stop before, tools.model_barrier)."""
    out: dict[str, list[float]] = {}
    for _, prompt, gen in answers:
        index, regions = tools.ngram_index(n_min, n_max, barrier), tools.lookup_regions(prompt, *fim)
        for key, (acc, reached) in priors.replay_lookups(prompt, gen, index, regions, LOOKUP_MAX_L, gate_key).items():
            row = out.setdefault(key, [0.0, 0.0])
            row[0] += acc
            row[1] += reached
    return out


def _load_answers(path: str) -> tuple[dict[str, list[tuple[str, list[int], list[int]]]], tuple[int, int]]:
    """({kind: [(prompt id, prompt tokens, answer tokens)]}, the FIM ids) as --answers saved them."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    ids = data.pop("_fim_ids", (-1, -1))
    return {k: [(str(i), list(p), list(g)) for i, p, g in v] for k, v in data.items()}, (int(ids[0]), int(ids[1]))


def _sorted(counts: dict[str, list[float]]) -> dict[str, list[float]]:
    def order(text: str) -> tuple:
        key = priors.parse_key(text) or (text, 0)
        return (key[0], key[1], key[2:])

    return dict(sorted(counts.items(), key=lambda kv: order(kv[0])))


def main(a: argparse.Namespace) -> int:
    from localspec.models import resolve_model

    target = resolve_model(a.model)
    per_kind: dict[str, dict[str, list[float]]] = {}
    answers_all = []
    by_kind, fim = _load_answers(a.answers) if a.answers and Path(a.answers).is_file() else ({}, (-1, -1))
    for kind in a.kinds:
        if kind not in by_kind and kind == FIM_KIND:
            by_kind[kind], fim = fim_answers(str(target), a.fim_holes, FIM_N_PREDICT, a.threads, a.half)
        elif kind not in by_kind:
            by_kind[kind] = greedy_answers(str(target), [kind], a.n_predict, a.threads, a.half)
        if kind != FIM_KIND:  # the draft's agreement is fitted on answers of -n tokens
            answers_all += by_kind[kind]
    # the tokens the session's lookups stop before, among those the answers hold (one model load)
    barrier = tools.model_barrier(target, (t for k in a.kinds for _, pr, g in by_kind[k] for t in (*pr, *g)))
    for kind in a.kinds:
        per_kind[kind] = lookup_counts(by_kind[kind], a.n_min, a.n_max, fim, barrier)
    if a.answers:
        saved: dict = {k: [list(x) for x in v] for k, v in by_kind.items()}
        Path(a.answers).write_text(json.dumps({**saved, "_fim_ids": list(fim)}), encoding="utf-8")
    pooled: dict[str, list[float]] = {}
    for counts in per_kind.values():
        for key, (acc, reached) in counts.items():
            row = pooled.setdefault(key, [0.0, 0.0])
            row[0] += acc
            row[1] += reached
    n_answers = sum(len(by_kind[k]) for k in a.kinds)
    print(f"lookup acceptance per matched length and where the match was ({a.half} half, {n_answers} answers):")
    for key, (acc, reached) in _sorted(pooled).items():
        kinds = ", ".join(f"{k} {c[key][0] / c[key][1]:.2f}/{c[key][1]:.0f}" for k, c in per_kind.items() if key in c)
        print(f"  {key:18s} alpha {acc / reached:.2f} over {reached:.0f} positions  ({kinds})")
    draft_entry = None
    if a.draft:
        draft = resolve_model(a.draft)
        cal = tools.draft_calibration(draft, [(pr, g) for _, pr, g in answers_all], a.threads)
        agree = [[ok for ok, _ in rows] for rows in cal]
        hits, n = sum(sum(x) for x in agree), sum(len(x) for x in agree)
        alpha = hits / max(n, 1)
        print(f"draft {draft.name}: agrees with the greedy answers at {alpha:.3f} of {n} positions "
              f"(median per prompt {median([sum(x) / max(len(x), 1) for x in agree]):.3f})")
        bins = calibration_bins(cal)
        print("  by its confidence: " + ", ".join(f"{b / len(bins):.1f}-{(b + 1) / len(bins):.1f} "
                                                 f"{acc / max(t, 1):.2f}/{t:.0f}" for b, (acc, t) in enumerate(bins)))
        draft_entry = (f"{target.name}--{draft.name}", round(alpha, 4), bins)
    if a.simulate:
        _simulate(a, {k: by_kind[k] for k in a.kinds}, fim, barrier)
    if a.out:
        _merge(Path(a.out), _sorted(pooled), draft_entry, a)
        print(f"wrote {a.out}", file=sys.stderr)
    return 0


def _simulate(a: argparse.Namespace, by_kind: dict[str, list[tuple[str, list[int], list[int]]]],
              fim: tuple[int, int], barrier: Container[int] = frozenset()) -> None:
    """auto's lookup gate replayed on the answers (bench/gate_replay.py), each answer a
    first turn, from the uninformed priors and from the priors file in use."""
    from localspec.bench import gate_replay
    from localspec.bench.ceiling import curve_from_points, engine_curve, parse_curve
    from localspec.costmodel.lookup import LookupGate

    if a.curve:
        cost = curve_from_points(parse_curve(a.curve))
    else:
        cost = engine_curve(a.model, a.threads, sizes=(1, 2, 4, 8, 16, 32, 64))[0]  # what the gate prices on
    gates = {"uninformed (before stop 46)": lambda: LookupGate(prior={}), "shipped priors": LookupGate}
    print("\nauto's lookups replayed on these answers, each a first turn (median speedup over AR on the curve):")
    print(gate_replay.summary(by_kind, gates, cost, a.n_min, a.n_max, fim, barrier))


def calibration_bins(cal: list[list[tuple[bool, float]]]) -> list[list[float]]:
    """[[accepted, positions]] per draft-confidence bin (the acceptance calibration's bins)
    over (agreed, confidence) pairs: at T = 0 a greedy draft's token is accepted iff it is
    the target's."""
    from localspec.costmodel.acceptance import N_BINS, _bin

    bins = [[0.0, 0.0] for _ in range(N_BINS)]
    for rows in cal:
        for ok, conf in rows:
            b = bins[_bin(conf)]
            b[0] += 1.0 if ok else 0.0
            b[1] += 1.0
    return bins


def _merge(path: Path, pooled: dict[str, list[float]], draft_entry: tuple[str, float, list[list[float]]] | None,
           a: argparse.Namespace) -> None:
    """Update a priors file: the lookup table replaced, the pair's draft entry set, the fit recorded."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    data["lookup"] = {k: [round(v[0], 1), round(v[1], 1)] for k, v in pooled.items()}
    fits = data.setdefault("fitted", {})
    fits["lookup"] = {"target": Path(str(a.model)).name, "half": a.half, "kinds": a.kinds, "n_predict": a.n_predict,
                      "date": datetime.date.today().isoformat(), "machine": machine_info(a.threads).get("cpu", "")}
    if draft_entry is not None:
        data.setdefault("draft", {})[draft_entry[0]] = draft_entry[1]
        data.setdefault("draft_bins", {})[draft_entry[0]] = draft_entry[2]
        fits[draft_entry[0]] = {"half": a.half, "kinds": a.kinds, "n_predict": a.n_predict,
                                "date": datetime.date.today().isoformat()}
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", default="qwen2.5-coder-1.5b", help="target (registry name or path)")
    p.add_argument("-md", "--model-draft", dest="draft", default=None,
                   help="also fit this draft model's acceptance with the target (its greedy agreement)")
    p.add_argument("--kinds", nargs="+", default=["edit", "code", "chat", FIM_KIND],
                   help="split sets to fit on; `fim`: the editor's completion requests on bench fim's holes "
                   "(the tuning half's, each at the cursor and after 3 typed words, 64 tokens)")
    p.add_argument("--fim-holes", type=int, default=32, metavar="N",
                   help="cut this many bench fim holes and answer the tuning half's (default 32: 16 holes)")
    p.add_argument("--half", choices=HALVES, default="tune", help="fit on this half (report figures come from the other)")
    p.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=128, help="answer tokens per prompt")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--spec-ngram-min", dest="n_min", type=int, default=GenConfig.ngram_min, metavar="N")
    p.add_argument("--spec-ngram-max", dest="n_max", type=int, default=GenConfig.ngram_max, metavar="N")
    p.add_argument("--answers", default=None, metavar="FILE",
                   help="keep the target's greedy answers here (JSON) and reuse them when the file exists "
                   "(they depend only on the target, the prompts and -n)")
    p.add_argument("--simulate", action="store_true",
                   help="replay auto's lookup gate on the answers, from the uninformed and the shipped priors "
                   "(bench/gate_replay.py), priced on --curve or llama-bench's pp curve")
    p.add_argument("--curve", default=None, help="the target's batch curve as tokens:ms pairs (as bench ceiling)")
    p.add_argument("--out", default=None, help="merge the fit into this priors file (the shipped one: "
                   "localspec/data/priors.json)")
