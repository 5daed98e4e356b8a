"""`localspec bench priors`: fit the acceptance priors a fresh session starts from, on a tuning half.

The target's greedy answers to the split sets' tuning half (never the report half) are
replayed: a lookup drafting wherever the history has a match gives, per matched n-gram length,
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
from pathlib import Path

from localspec import tools
from localspec.bench.ceiling import greedy_answers
from localspec.bench.common import HALVES, machine_info, median
from localspec.config import GenConfig
from localspec.costmodel import priors
from localspec.costmodel.lookup import LOOKUP_MAX_L


def lookup_counts(answers: list[tuple[str, list[int], list[int]]], n_min: int, n_max: int) -> dict[str, list[float]]:
    """Pooled {"ngram:n": [accepted, reached]} over the answers (a fresh index per answer)."""
    out: dict[str, list[float]] = {}
    for _, prompt, gen in answers:
        for key, (acc, reached) in priors.replay_lookups(prompt, gen, tools.ngram_index(n_min, n_max), LOOKUP_MAX_L).items():
            row = out.setdefault(key, [0.0, 0.0])
            row[0] += acc
            row[1] += reached
    return out


def _sorted(counts: dict[str, list[float]]) -> dict[str, list[float]]:
    return dict(sorted(counts.items(), key=lambda kv: (kv[0].rpartition(":")[0], int(kv[0].rpartition(":")[2]))))


def main(a: argparse.Namespace) -> int:
    from localspec.models import resolve_model

    target = resolve_model(a.model)
    per_kind: dict[str, dict[str, list[float]]] = {}
    answers_all = []
    for kind in a.kinds:
        answers = greedy_answers(str(target), [kind], a.n_predict, a.threads, a.half)
        answers_all += answers
        per_kind[kind] = lookup_counts(answers, a.n_min, a.n_max)
    pooled: dict[str, list[float]] = {}
    for counts in per_kind.values():
        for key, (acc, reached) in counts.items():
            row = pooled.setdefault(key, [0.0, 0.0])
            row[0] += acc
            row[1] += reached
    print(f"lookup acceptance per matched length ({a.half} half, {len(answers_all)} answers):")
    for key, (acc, reached) in _sorted(pooled).items():
        kinds = ", ".join(f"{k} {c[key][0] / c[key][1]:.2f}/{c[key][1]:.0f}" for k, c in per_kind.items() if key in c)
        print(f"  {key:10s} alpha {acc / reached:.2f} over {reached:.0f} positions  ({kinds})")
    draft_entry = None
    if a.draft:
        draft = resolve_model(a.draft)
        agree = tools.draft_agreement(draft, [(pr, g) for _, pr, g in answers_all], a.threads)
        hits, n = sum(sum(x) for x in agree), sum(len(x) for x in agree)
        alpha = hits / max(n, 1)
        print(f"draft {draft.name}: agrees with the greedy answers at {alpha:.3f} of {n} positions "
              f"(median per prompt {median([sum(x) / max(len(x), 1) for x in agree]):.3f})")
        draft_entry = (f"{target.name}--{draft.name}", round(alpha, 4))
    if a.out:
        _merge(Path(a.out), _sorted(pooled), draft_entry, a)
        print(f"wrote {a.out}", file=sys.stderr)
    return 0


def _merge(path: Path, pooled: dict[str, list[float]], draft_entry: tuple[str, float] | None,
           a: argparse.Namespace) -> None:
    """Update a priors file: the lookup table replaced, the pair's draft entry set, the fit recorded."""
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    data["lookup"] = {k: [round(v[0], 1), round(v[1], 1)] for k, v in pooled.items()}
    fits = data.setdefault("fitted", {})
    fits["lookup"] = {"target": Path(str(a.model)).name, "half": a.half, "kinds": a.kinds, "n_predict": a.n_predict,
                      "date": datetime.date.today().isoformat(), "machine": machine_info(a.threads).get("cpu", "")}
    if draft_entry is not None:
        data.setdefault("draft", {})[draft_entry[0]] = draft_entry[1]
        fits[draft_entry[0]] = {"half": a.half, "kinds": a.kinds, "n_predict": a.n_predict,
                                "date": datetime.date.today().isoformat()}
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", default="qwen2.5-coder-1.5b", help="target (registry name or path)")
    p.add_argument("-md", "--model-draft", dest="draft", default=None,
                   help="also fit this draft model's acceptance with the target (its greedy agreement)")
    p.add_argument("--kinds", nargs="+", default=["edit", "code", "chat"], help="split sets to fit on")
    p.add_argument("--half", choices=HALVES, default="tune", help="fit on this half (report figures come from the other)")
    p.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=128, help="answer tokens per prompt")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--spec-ngram-min", dest="n_min", type=int, default=GenConfig.ngram_min, metavar="N")
    p.add_argument("--spec-ngram-max", dest="n_max", type=int, default=GenConfig.ngram_max, metavar="N")
    p.add_argument("--out", default=None, help="merge the fit into this priors file (the shipped one: "
                   "localspec/data/priors.json)")
