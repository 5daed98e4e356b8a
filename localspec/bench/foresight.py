"""What a draft-length rule without foresight could give: `bench ceiling -md`'s second bound.

The ceiling's oracle (ceiling.mixed_replay) knows where every draft goes wrong, so it drafts
exactly the tokens that will be accepted. A live rule cannot: it sees the draft's confidence
in each token it drafted, and must stop before it knows the outcome. Issue 40 asks auto for
85 % of the oracle; whether any rule can get there is a property of how well confidence
predicts acceptance, which this replay measures on the same answers.

The rule replayed here is better placed than any live one:

- it knows, at the start of a pass, the confidences of every token the draft would draft
  from there (read off one teacher-forced decode, decode/agreement.py), not only those of
  the tokens drafted so far;
- it reads acceptance off a calibration fitted on these same answers (acceptance per
  confidence bin), not on a tuning half;
- its one free parameter, the rate an iteration is priced against, is the best of a grid
  for this set.

Each pass it picks the length L that maximises E[tokens] - rate x cost(L), with E[tokens] =
1 + sum_j P(the first j tokens accepted) from the calibrated confidences, then advances by
what the answer really accepts (min(run, L) + 1). So its speedup is an upper bound for a
rule that stops on the draft's confidence alone, and its share of the oracle on the draft
model alone says how much of the oracle's lead is foresight, which no policy has. (After a
wrong token a live draft goes on from its own wrong text; the replay reads the confidences
the right text gives there: those tokens are rejected either way, only the stop moves.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

CostFn = Callable[[int], float]
BINS = 20


def fit_calibration(pairs: Sequence[tuple[bool, float]], bins: int = BINS) -> np.ndarray:
    """Acceptance per confidence bin (bins equal in width over [0, 1]) over (agree,
    confidence) pairs; an empty bin takes its confidence's midpoint (no evidence: the
    confidence at face value)."""
    hits = np.zeros(bins)
    seen = np.zeros(bins)
    for agree, conf in pairs:
        b = min(int(conf * bins), bins - 1)
        seen[b] += 1
        hits[b] += agree
    mid = (np.arange(bins) + 0.5) / bins
    return np.where(seen > 0, hits / np.maximum(seen, 1), mid)


def _accept_probs(conf: Sequence[float], table: np.ndarray) -> np.ndarray:
    idx = np.minimum((np.asarray(conf, dtype=float) * len(table)).astype(int), len(table) - 1)
    return table[idx]


def blind_replay(agree: Sequence[bool], conf: Sequence[float], cost: CostFn, draft_step: float,
                 l_max: int, rate: float, table: np.ndarray) -> tuple[float, float]:
    """(speedup over AR, tokens per target decode) of the confidence rule on one answer,
    drafting with the draft model alone (as mixed_replay with no lookups), at `rate`
    tokens per second."""
    n = len(agree)
    if n < 2:
        return 1.0, 1.0
    runs = [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        runs[i] = runs[i + 1] + 1 if agree[i] else 0
    q = _accept_probs(conf, table)
    i, spent, decodes = 1, cost(1), 1
    while i < n:
        top = min(l_max, n - 1 - i)  # the decode's own token ends the answer
        reach = np.cumprod(q[i : i + top])  # P(the first j drafted tokens are all accepted)
        expected = 1.0 + np.concatenate(([0.0], np.cumsum(reach)))
        costs = np.array([cost(1)] + [m * draft_step + cost(1 + m) for m in range(1, top + 1)])
        m = int(np.argmax(expected - rate * costs))
        spent += costs[m]
        i += min(runs[i], m) + 1
        decodes += 1
    return n * cost(1) / spent, n / decodes


def best_blind(answers: Sequence[Sequence[tuple[bool, float]]], cost: CostFn, draft_step: float,
               l_max: int) -> tuple[float, list[tuple[float, float]]]:
    """(the rate chosen, per-answer (speedup, tokens per decode)) of the confidence rule at
    the rate of a grid (0.5x to 5x the AR rate) that gives the best median speedup over
    these answers, with the calibration fitted on them: the rule's best case."""
    table = fit_calibration([p for ans in answers for p in ans])
    ar_rate = 1.0 / cost(1)
    best: tuple[float, float, list[tuple[float, float]]] = (-1.0, 0.0, [])
    for factor in np.linspace(0.5, 5.0, 46):
        per = [blind_replay([a for a, _ in ans], [c for _, c in ans], cost, draft_step, l_max,
                            factor * ar_rate, table) for ans in answers]
        score = float(np.median([p[0] for p in per])) if per else 0.0
        if score > best[0]:
            best = (score, factor * ar_rate, per)
    return best[1], best[2]
