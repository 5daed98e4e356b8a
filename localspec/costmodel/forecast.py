"""What the cost model expects of each iteration it runs, summed over a turn.

Why: `Stats.predicted` holds the promise made when a setting is chosen, on one mean
acceptance and one fixed draft length, before the answer is seen. It cannot be right on a
turn whose drafts end by the calibrated stop rule (their length follows the draft's
confidence) or whose lookups write most of the answer (an edit): the F16 code prompts
measured 1.11x what it promised, the edit prompts 2.15x (stop 52). That says the promise
is coarse, not which estimate is wrong.

The forecast asks each estimate about the iteration it actually priced, before the target
verified it: the expected tokens of the draft that was drafted (the calibrated acceptance of
each drafted token, from the draft's own confidences; a lookup's gate estimate for its key
and length; a grammar's forced tokens: all of them), and the seconds the measured curves
give for the batch shapes that ran. Summed over the turn, tokens / seconds against the
curve's AR step is the speedup the cost model expected of what it did; a bench sets it
beside the measured one (bench/speed.predicted_vs_measured). A miss in tokens is an
acceptance estimate's, a miss in seconds a curve's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from localspec.costmodel.predict import CostModel


def chain_tokens(probs: Sequence[float]) -> float:
    """Expected tokens one verified draft emits: its accepted prefix (token i counts when
    every token up to it is accepted) plus the target's own token."""
    e, reach = 1.0, 1.0
    for p in probs:
        reach *= p
        e += reach
    return e


def whole(probs: Sequence[float]) -> float:
    """The chance a draft with these per-token acceptances is accepted whole."""
    out = 1.0
    for p in probs:
        out *= p
    return out


def model_probs(cm: CostModel, K: int, confs: Sequence[float], drafted: int) -> list[float]:
    """Per-token acceptance of a draft-model draft: one draft by its calibrated confidences;
    K drafts (no confidence per draft kept) by the mean acceptance, as one chain."""
    if K == 1 and confs:
        return [cm.acceptance.accept_prob(c) for c in confs[:drafted]]
    return [cm.acceptance.alpha] * drafted


def model_tokens(cm: CostModel, K: int, confs: Sequence[float], drafted: int) -> float:
    """Expected tokens of a draft-model iteration (K drafts: P(some draft matches i tokens))."""
    if K == 1 and confs:
        return chain_tokens(model_probs(cm, K, confs, drafted))
    return cm.expected_tokens(K, drafted)


def iteration_seconds(cm: CostModel, rows: int, draft_calls: int, K: int, overhead: float,
                      drafted: int = 0, probs: Sequence[float] = (), tokens: float = 1.0) -> float:
    """What the curves price an iteration of `rows` target rows and `draft_calls` draft
    decodes at, with the Python work measured per iteration of its kind (`overhead`), and,
    on a recurrent memory, the catch-up a draft of `drafted` tokens with per-token
    acceptances `probs` (expected to emit `tokens`) costs when it is not accepted whole
    (CostModel.rollback_seconds, as the prediction prices it)."""
    draft = draft_calls * cm.draft(max(K, 1)) if draft_calls else 0.0
    kept = max(1, round(tokens))
    back = cm.rollback_seconds(drafted, kept, whole(probs), whole(probs[: max(drafted - 1, 0)]), draft_calls > 0)
    return draft + cm.target(max(rows, 1)) + overhead + back


def add(into: list[float], tokens: float, seconds: float) -> None:
    """Add one iteration to a turn's sums (Stats.forecast: [expected tokens, seconds])."""
    if len(into) < 2:
        into[:] = [0.0, 0.0]
    into[0] += tokens
    into[1] += seconds

