"""Replay auto's lookup gate on the target's greedy answers: a policy judged without a model.

At T = 0 a lookup's draft is accepted exactly as far as it agrees with the greedy answer, so
auto's AR-phase decisions (decode/policy/auto.lookup_bet: the `ngram` lookup's match, the
gate's best length on the target's batch curve, its update after each verification) can be
replayed on saved answers (`bench priors --answers`) in milliseconds, for any prior or gate
rule, and priced on a batch curve. `bench priors --simulate` prints the replay per kind for
the shipped priors and the uninformed ones; a gate change is judged on the tuning half's
answers this way before a report-half bench run measures it.
"""

from __future__ import annotations

from collections.abc import Callable, Container

from localspec import tools
from localspec.bench.common import median
from localspec.costmodel.curves import CostCurve
from localspec.costmodel.lookup import LOOKUP_LONG_L, LookupGate, gate_key, lookup_limit
from localspec.costmodel.priors import right_prefix


def replay(prompt: list[int], gen: list[int], gate: LookupGate, cost: CostCurve, n_min: int, n_max: int,
           l_max: int = LOOKUP_LONG_L, believed: CostCurve | None = None,
           fim: tuple[int, int] = (-1, -1), barrier: Container[int] = frozenset()) -> tuple[float, int, int]:
    """(seconds, target passes, drafted tokens) of auto's AR phase over one answer: at each
    position the lookup's match is priced by `gate` and drafted at its best length, or the
    target writes one token; the gate learns from each verification as in a turn. Seconds
    are `cost`'s; the gate decides on `believed` (the cost model's curve, which may differ
    from the machine's: a cached curve timed on a busier minute), `cost` when None. `fim`:
    the model's FIM suffix and middle token ids (a FIM prompt's prefix and suffix are bets apart);
    `barrier`: the tokens the session's lookups stop before (tools.model_barrier)."""
    index = tools.ngram_index(n_min, n_max, barrier)
    regions = tools.lookup_regions(prompt, *fim)
    seconds, passes, drafted = cost(1), 1, 0  # gen[0]: the prompt's last token's decode
    i = 1
    while i < len(gen):
        index.extend(prompt + gen[:i])
        toks, matched = index.continuation(l_max)
        key = gate_key("ngram", matched, regions.origin(index.at), index.run)
        # as auto: a long copy's match may bet up to LOOKUP_LONG_L, and a bet never runs
        # past the answer's end (the engine caps a draft at the tokens left to write, + 1)
        avail = min(len(toks), lookup_limit(index.run), len(gen) - i + 1)
        L = gate.best_length(believed or cost, key, avail)[0] if toks else 0
        if L == 0:
            seconds += cost(1)
            passes += 1
            i += 1
            continue
        tau = right_prefix(toks[:L], gen[i:])
        gate.update(key, tau, L)
        seconds += cost(1 + L) + gate.overhead
        passes += 1
        drafted += L
        i += tau + 1
    return seconds, passes, drafted


def speedups(answers: list[tuple[str, list[int], list[int]]], make_gate: Callable[[], LookupGate],
             cost: CostCurve, n_min: int, n_max: int, first_turn: bool = True,
             believed: CostCurve | None = None, fim: tuple[int, int] = (-1, -1),
             barrier: Container[int] = frozenset()) -> list[float]:
    """Per answer, AR's seconds over the replay's (a fresh gate per answer when `first_turn`,
    else one gate learning across them in order, as a long session's)."""
    out = []
    gate = make_gate()
    for _, prompt, gen in answers:
        if first_turn:
            gate = make_gate()
        if len(gen) < 2:
            continue
        seconds, _, _ = replay(prompt, gen, gate, cost, n_min, n_max, believed=believed, fim=fim, barrier=barrier)
        out.append(len(gen) * cost(1) / seconds)
    return out


def summary(answers_by_kind: dict[str, list[tuple[str, list[int], list[int]]]], gates: dict[str, Callable[[], LookupGate]],
            cost: CostCurve, n_min: int, n_max: int, fim: tuple[int, int] = (-1, -1),
            barrier: Container[int] = frozenset()) -> str:
    """A markdown table: median replayed speedup over AR per kind and gate."""
    kinds = list(answers_by_kind)
    rows = ["| gate | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for name, make in gates.items():
        cells = [f"{median(speedups(answers_by_kind[k], make, cost, n_min, n_max, fim=fim, barrier=barrier)):.3f}x"
                 for k in kinds]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)
